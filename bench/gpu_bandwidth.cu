// The ceiling sgc's memory-bound kernels are measured against: how fast an AdamW-shaped update
// (reads p f32, g bf16, m f32, v f32; writes p, m, v and p's bf16 copy: 28 bytes an element) and
// a plain f32 copy run on this card, by elements a thread (V), threads a block and grid shape (one
// iteration a thread, as sgc launches elementwise kernels, or a grid-stride loop over a few blocks
// an SM), at the sizes of Llama's MLP weight (2048 x 5632) and of a 32,000-word embedding. Written
// by hand in CUDA, not by sgc: a reference for what the card allows, run beside the benchmark.
// Prints TB/s of the bytes read and written (each once).
// Usage (on the device): nvcc -O3 -arch=sm_90 -o /tmp/bw bench/gpu_bandwidth.cu && /tmp/bw
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>

struct Adam { float lr, b1, b2, eps, wd, c1, c2; };

template <int V>
__device__ __forceinline__ void adamAt(long i, float* __restrict__ p, const __nv_bfloat16* __restrict__ g, float* __restrict__ m,
                                       float* __restrict__ v, __nv_bfloat16* __restrict__ pc, Adam a) {
  float pr[V], mr[V], vr[V], gr[V];
#pragma unroll
  for (int u = 0; u < V; u += 4) {
    *(float4*)&pr[u] = *(const float4*)&p[i + u];
    *(float4*)&mr[u] = *(const float4*)&m[i + u];
    *(float4*)&vr[u] = *(const float4*)&v[i + u];
  }
  __nv_bfloat16 gb[V];
#pragma unroll
  for (int u = 0; u < V; u += 8) *(uint4*)&gb[u] = *(const uint4*)&g[i + u];
#pragma unroll
  for (int u = 0; u < V; ++u) gr[u] = __bfloat162float(gb[u]);
  __nv_bfloat16 cb[V];
#pragma unroll
  for (int u = 0; u < V; ++u) {
    float mm = a.b1 * mr[u] + (1 - a.b1) * gr[u];
    float vv = a.b2 * vr[u] + (1 - a.b2) * gr[u] * gr[u];
    float pp = pr[u] * (1 - a.lr * a.wd) - a.lr * (mm / a.c1) / (sqrtf(vv / a.c2) + a.eps);
    mr[u] = mm, vr[u] = vv, pr[u] = pp, cb[u] = __float2bfloat16(pp);
  }
#pragma unroll
  for (int u = 0; u < V; u += 4) {
    *(float4*)&p[i + u] = *(float4*)&pr[u];
    *(float4*)&m[i + u] = *(float4*)&mr[u];
    *(float4*)&v[i + u] = *(float4*)&vr[u];
  }
#pragma unroll
  for (int u = 0; u < V; u += 8) *(uint4*)&pc[i + u] = *(uint4*)&cb[u];
}

template <int V>
__global__ void adamOne(long n, float* p, const __nv_bfloat16* g, float* m, float* v, __nv_bfloat16* pc, Adam a) {
  long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i < n) adamAt<V>(i, p, g, m, v, pc, a);
}
template <int V>
__global__ void adamStride(long n, float* p, const __nv_bfloat16* g, float* m, float* v, __nv_bfloat16* pc, Adam a) {
  for (long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * V; i < n; i += (long)gridDim.x * blockDim.x * V) adamAt<V>(i, p, g, m, v, pc, a);
}
__global__ void copy4(long n, const float4* __restrict__ x, float4* __restrict__ y) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (long)gridDim.x * blockDim.x) y[i] = x[i];
}

static float timeIt(cudaEvent_t e0, cudaEvent_t e1, void (*f)(void*), void* c) {
  f(c); cudaDeviceSynchronize();
  cudaEventRecord(e0);
  for (int r = 0; r < 20; ++r) f(c);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  return ms / 20;
}

struct Case { long n; int threads, blocks, v; bool stride; float *p, *m, *v_; __nv_bfloat16 *g, *pc; };

template <int V>
static void launch(Case& c) {
  Adam a{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f};
  long iters = (c.n + V - 1) / V;
  if (c.stride) adamStride<V><<<c.blocks, c.threads>>>(c.n, c.p, c.g, c.m, c.v_, c.pc, a);
  else adamOne<V><<<(iters + c.threads - 1) / c.threads, c.threads>>>(c.n, c.p, c.g, c.m, c.v_, c.pc, a);
}
static void run(void* q) {
  Case& c = *(Case*)q;
  if (c.v == 4) launch<4>(c); else if (c.v == 8) launch<8>(c); else launch<16>(c);
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
  printf("%s, %d SMs\n", prop.name, sms);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (long n : {2048L * 5632, 2048L * 32000}) {
    Case c{n};
    if (cudaMalloc(&c.p, n * 4) || cudaMalloc(&c.m, n * 4) || cudaMalloc(&c.v_, n * 4) || cudaMalloc(&c.g, n * 2) || cudaMalloc(&c.pc, n * 2)) {
      printf("cannot allocate %ld elements' buffers: %s\n", n, cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    cudaMemset(c.p, 0, n * 4); cudaMemset(c.m, 0, n * 4); cudaMemset(c.v_, 0, n * 4); cudaMemset(c.g, 0, n * 2);
    double bytes = 28.0 * n;
    for (int v : {4, 8, 16})
      for (int threads : {128, 256, 512}) {
        c.v = v, c.threads = threads, c.stride = false;
        float ms = timeIt(e0, e1, run, &c);
        printf("adam n=%ld V=%2d threads=%3d one-a-thread        %.4f ms %.2f TB/s\n", n, v, threads, ms, bytes / ms / 1e9);
        for (int k : {2, 4, 8}) {
          c.stride = true, c.blocks = sms * k * (1024 / threads) / 2;
          ms = timeIt(e0, e1, run, &c);
          printf("adam n=%ld V=%2d threads=%3d stride blocks=%5d %.4f ms %.2f TB/s\n", n, v, threads, c.blocks, ms, bytes / ms / 1e9);
        }
      }
    struct Copy { long n; float *x, *y; int sms; } cc{n, c.p, c.m, sms};
    float ms = timeIt(e0, e1, [](void* q) { Copy& c = *(Copy*)q; copy4<<<c.sms * 8, 256>>>(c.n, (const float4*)c.x, (float4*)c.y); }, &cc);
    printf("copy n=%ld f32                                %.4f ms %.2f TB/s\n", n, ms, 8.0 * n / ms / 1e9);
    if (cudaError_t e = cudaGetLastError()) {
      printf("a kernel failed: %s\n", cudaGetErrorString(e));
      return 1;
    }
    cudaFree(c.p); cudaFree(c.m); cudaFree(c.v_); cudaFree(c.g); cudaFree(c.pc);
  }
  return 0;
}
