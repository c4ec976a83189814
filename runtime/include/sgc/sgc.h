/* The C ABI of a model compiled by sgc (train.so). Plain C; nothing in it is
 * C++. Every function returns a status; on error, sgc_last_error() gives a
 * thread-local message and outputs are left untouched. Handles are opaque;
 * destroy functions accept NULL. Tensors cross the boundary as DLPack
 * DLTensors (host memory, contiguous). Only sgc_* symbols are exported.
 *
 * Typical use:
 *   sgc_session_options o = SGC_SESSION_OPTIONS_INIT;
 *   sgc_session* s; sgc_session_create(&o, &s);
 *   sgc_set_input(s, "x", &x); sgc_set_input(s, "y", &y);
 *   double loss; sgc_train_step(s, &loss);
 *   sgc_save(s, "ckpt.safetensors"); sgc_session_destroy(s);
 */
#ifndef SGC_SGC_H
#define SGC_SGC_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SGC_ABI_VERSION 1

/* The most steps a session counts: the state tensor "sgc.step" (int64, the optimizer's step
 * counter) is from 0 to SGC_MAX_STEP (2^53, where a double still counts exactly); sgc_load and
 * sgc_set_tensor refuse other values. */
#define SGC_MAX_STEP (INT64_C(1) << 53)

#if defined(__GNUC__)
#define SGC_API __attribute__((visibility("default")))
#else
#define SGC_API
#endif

typedef enum {
  SGC_OK = 0,
  SGC_ERROR_INVALID_ARGUMENT = 1, /* NULL pointers, bad options, wrong call order */
  SGC_ERROR_NOT_FOUND = 2,        /* no input or parameter of that name */
  SGC_ERROR_SHAPE_MISMATCH = 3,
  SGC_ERROR_DTYPE_MISMATCH = 4,
  SGC_ERROR_DEVICE = 5,           /* a device that is absent or not supported */
  SGC_ERROR_IO = 6,               /* files: missing, unreadable, malformed */
  SGC_ERROR_OUT_OF_MEMORY = 7,
  SGC_ERROR_INTERNAL = 8,
  SGC_ERROR_COMMUNICATION = 9,    /* data parallelism: a peer rank failed, stopped answering or runs another program */
  SGC_ERROR_OUT_OF_PAGES = 10,    /* decoding: the key/value cache has no free page (or sequence slot) left; nothing
                                     changed: free a sequence, or wait for one to finish, and call again */
  SGC_ERROR_NONFINITE = 11        /* sgc_train_step: the loss is NaN or infinite (on some rank); the step was not
                                     applied: parameters and optimizer state are as before it (the loss is returned) */
} sgc_status;

/** The ABI version this library implements (SGC_ABI_VERSION). */
SGC_API uint32_t sgc_abi_version(void);

/** The message of the last error on this thread ("" when none). */
SGC_API const char* sgc_last_error(void);

typedef struct sgc_session sgc_session;

/** The compiled program this library carries, as JSON: its tensors and their places in the
 * regions of the static memory plan, the kernel launches of a step, and for a decoding library
 * the paged cache's sizes (what `sgc inspect lib.so` prints). No session is needed; the text
 * lives as long as the library is loaded. */
SGC_API sgc_status sgc_program_json(const char** json, uint64_t* size);

typedef struct {
  uint32_t struct_size; /* sizeof(sgc_session_options); hosts built before the fields below pass a smaller size */
  uint32_t version;     /* SGC_ABI_VERSION */
  const char* device;   /* "cpu" (default when NULL) or "cuda:N" */
  int32_t num_threads;  /* 0: one per available core; at most four a core (64 on any machine) */
  /* Data-parallel training, for libraries compiled with --data-parallel. Each rank runs a session
   * on its share of every batch; the gradients (and the loss) are averaged over the ranks. */
  const char* communicator; /* NULL or "none": one rank. "mpi": the ranks of MPI_COMM_WORLD (OpenMPI's
                               libmpi.so.40, loaded then; MPI is initialized unless the host did it); on
                               a GPU the gradients go through NCCL, its id sent over MPI. "nccl" (GPU):
                               rank `rank` of `world_size`, with the id rank 0 got from
                               sgc_nccl_unique_id (the host hands it to every rank) */
  int32_t timeout_ms;       /* a collective not finished by then fails the step with
                               SGC_ERROR_COMMUNICATION (0: 300000) */
  int32_t rank, world_size; /* "nccl" only */
  uint8_t nccl_id[128];     /* "nccl" only */
  void* cuda_stream;        /* "cuda:N": a stream of the host's (a CUstream / cudaStream_t of the device's
                               primary context, as PyTorch's streams are; not the legacy default stream)
                               that the session's copies and steps run on, after what the host queued
                               there before each call; the session never destroys it. NULL: a stream of
                               the session's own */
} sgc_session_options;

#define SGC_SESSION_OPTIONS_INIT {sizeof(sgc_session_options), SGC_ABI_VERSION, "cpu", 0, NULL, 0, 0, 1, {0}, NULL}

/** A new NCCL unique id (128 bytes), for the "nccl" communicator: rank 0 makes it, and the host
 * passes it to every rank's session (loads libnccl.so.2; SGC_NCCL names another path). */
SGC_API sgc_status sgc_nccl_unique_id(uint8_t id[128]);

/** Creates a session: the arena of the static memory plan, the initial weights. With a
 * communicator, the ranks then compare their libraries' hashes and all fail
 * (SGC_ERROR_COMMUNICATION, naming both hashes) if they differ. */
SGC_API sgc_status sgc_session_create(const sgc_session_options* options, sgc_session** out);
SGC_API void sgc_session_destroy(sgc_session* session);

/* ---- Self-description ---- */

/** Hex content hash of what produced the library (model, options, sgc version). */
SGC_API sgc_status sgc_model_hash(const sgc_session* session, const char** hash);
/** What runs the session: "cpu (N threads)", or the GPU with its code, its GEMM library and
 * whether the step is replayed as a CUDA graph. Valid until the next call on the session. */
SGC_API sgc_status sgc_device_description(const sgc_session* session, const char** description);
/** This session's rank and the number of ranks (0 and 1 without a communicator). */
SGC_API sgc_status sgc_rank(const sgc_session* session, int32_t* rank, int32_t* world_size);
/** Bytes of the memory plan (all regions of the arena). */
SGC_API sgc_status sgc_memory_plan_bytes(const sgc_session* session, uint64_t* bytes);

typedef enum { SGC_TENSOR_INPUT = 0, SGC_TENSOR_PARAMETER = 1, SGC_TENSOR_STATE = 2, SGC_TENSOR_OUTPUT = 3 } sgc_tensor_kind;

/** Number of tensors of a kind (inputs the host feeds, parameters, optimizer state, outputs: the
 * loss that sgc_train_step returns). */
SGC_API sgc_status sgc_tensor_count(const sgc_session* session, sgc_tensor_kind kind, int32_t* count);
/** The name, dtype and shape of tensor `index` of a kind. Pointers stay valid for the session. */
SGC_API sgc_status sgc_tensor_info(const sgc_session* session, sgc_tensor_kind kind, int32_t index, const char** name,
                           DLDataType* dtype, int32_t* ndim, const int64_t** shape);

/* ---- Steps ---- */

/** Copies `tensor` into the input of that name (dtype and shape must match exactly). It lies in
 * host memory or, for a cuda:N session, on that GPU (copied on the session's stream, so ordered
 * after the host's writes when the host's stream is the session's; integer indices on a GPU are
 * not checked against their range, the kernels clamp them). */
SGC_API sgc_status sgc_set_input(sgc_session* session, const char* name, const DLTensor* tensor);
/** Sets the learning rate used from the next step on. */
SGC_API sgc_status sgc_set_learning_rate(sgc_session* session, double lr);
/** One training step (forward, backward, optimizer) on the current inputs; the loss (with a
 * communicator, its mean over the ranks). After SGC_ERROR_COMMUNICATION every later step fails.
 * A NaN or infinite loss gives SGC_ERROR_NONFINITE and changes nothing. */
SGC_API sgc_status sgc_train_step(sgc_session* session, double* loss);
/** The forward pass only, on the current inputs; nothing is updated. */
SGC_API sgc_status sgc_eval_step(sgc_session* session, double* loss);
/** Traces the next step (sgc_train_step or sgc_eval_step): when it ends, a Chrome trace event
 * file (Perfetto and chrome://tracing open it) is written to `path` (atomically): every launch
 * with its kernel, its ops, the bytes of its tensors and its time, on the compute thread, and
 * the collectives' waits on a communication thread; on a GPU, each launch timed by CUDA events
 * on its stream (compute, communication), the step run launch by launch rather than as its CUDA
 * graph. NULL cancels. SGC_ERROR_IO when the file's folder does not exist. */
SGC_API sgc_status sgc_trace_next_step(sgc_session* session, const char* path);

/* ---- Parameters and checkpoints ---- */

/** Copies a parameter or state tensor into `out` (dtype and shape must match; host memory or the
 * session's GPU, and the copy is done when the call returns). */
SGC_API sgc_status sgc_get_tensor(const sgc_session* session, const char* name, DLTensor* out);
/** Describes a parameter or state tensor where the session holds it, without copying: `out`
 * gets its address (host memory, or the GPU's for a cuda:N session), device, dtype and shape
 * (arrays the session owns; strides NULL). Valid until the session is destroyed; a write there is
 * what the next step reads. Under a running step the bytes change. (A library compiled with
 * --precision bf16 and Adam keeps its weights' bf16 copies, which its optimizer writes; once a
 * parameter's view is out, every later step of the session casts them again first, about 6 bytes
 * a parameter, as sgc_set_tensor and sgc_load make the next step do.) */
SGC_API sgc_status sgc_tensor_view(const sgc_session* session, const char* name, DLTensor* out);
/** Overwrites a parameter or state tensor (from host memory or the session's GPU; the step
 * counter from host memory). */
SGC_API sgc_status sgc_set_tensor(sgc_session* session, const char* name, const DLTensor* tensor);
/** Writes parameters and optimizer state as safetensors (temporary file, then rename). With a
 * communicator every rank calls it and rank 0 writes; optimizer state sharded by
 * --data-parallel zero1 is gathered from all ranks (and sgc_load gives each rank its part). */
SGC_API sgc_status sgc_save(const sgc_session* session, const char* path);
/** Loads a checkpoint: every parameter, and optionally optimizer state (state it lacks keeps its
 * values). Names, dtypes and shapes are checked before anything changes; a float32 tensor loads
 * into a bf16 parameter (a decoding library keeps its weights in bf16) rounded to nearest. A library compiled with
 * --weights none must load its parameters this way before the first step. */
SGC_API sgc_status sgc_load(sgc_session* session, const char* path);

/* ---- Decoding (libraries compiled with --mode decode) ----
 * The library runs a decoder's step over a paged key/value cache: a pool of pages per layer,
 * block tables and a free list, all sized at compile time. The host adds sequences (their prompts
 * are prefilled), forks and frees them, and decodes one token of any set of live sequences per
 * call (continuous batching: sequences join and leave between calls). A sequence is named by its
 * slot, 0 <= seq < max_seqs. Logits are float32 [count, vocab]. */

typedef struct {
  int32_t block_size;      /* tokens per page */
  int32_t blocks;          /* pages in the pool (of every layer) */
  int32_t max_seqs;        /* sequence slots */
  int32_t max_context;     /* the longest sequence: prompt and generated tokens */
  int32_t tokens_per_step; /* tokens one step of the compiled program runs */
  int32_t vocab;           /* logits per token */
  int32_t layers;          /* caches, one per attention layer */
  int32_t free_pages;      /* pages free now */
  int32_t live_seqs;       /* sequences live now */
  uint64_t pool_bytes;     /* the pages of all layers (in the memory plan) */
  uint64_t table_bytes;    /* the block tables (in the memory plan) */
  uint64_t free_list_bytes; /* the free list and reference counts (host) */
} sgc_decode_info;

/** The cache's sizes and occupancy; SGC_ERROR_INVALID_ARGUMENT for a library that trains. */
SGC_API sgc_status sgc_decode_info_get(const sgc_session* session, sgc_decode_info* info);
/** Adds a sequence: takes a slot and the pages of its prompt, and runs the prompt (prefill). `seq`
 * gets its slot; `logits` (NULL or vocab floats) those of the prompt's last token. The full pages
 * the prompt starts with that a live sequence holds (the same tokens after the same pages) are
 * shared, not computed again (prefix caching; its last token is always computed). A prompt longer
 * than max_context is SGC_ERROR_INVALID_ARGUMENT; no slot or too few free pages,
 * SGC_ERROR_OUT_OF_PAGES (nothing changed). */
SGC_API sgc_status sgc_seq_add(sgc_session* session, const int64_t* prompt, int32_t length, int32_t* seq, float* logits);
/** A new sequence sharing every token of live `seq` (its pages, by reference count; the partly
 * filled last page is copied when either sequence next writes to it). */
SGC_API sgc_status sgc_seq_fork(sgc_session* session, int32_t seq, int32_t* child);
/** Frees live `seq`: its slot, and its pages that no other sequence shares. */
SGC_API sgc_status sgc_seq_free(sgc_session* session, int32_t seq);
/** The tokens (prompt and decoded) live `seq` holds. */
SGC_API sgc_status sgc_seq_length(const sgc_session* session, int32_t seq, int32_t* length);
/** One decoding step: appends tokens[i] to live sequence seqs[i] (each at most once) and gives
 * the logits [count, vocab] of the next token of each. A sequence at max_context is
 * SGC_ERROR_INVALID_ARGUMENT, too few free pages SGC_ERROR_OUT_OF_PAGES (nothing changed). */
SGC_API sgc_status sgc_decode_step(sgc_session* session, int32_t count, const int32_t* seqs, const int64_t* tokens, float* logits);
/** sgc_seq_add, handing back the greedy next token (the argmax of the prompt's last logits,
 * computed where the step runs: on a GPU, 8 bytes come back instead of the logits) to `next`,
 * and the logits too when `logits` is not NULL. */
SGC_API sgc_status sgc_seq_add_greedy(sgc_session* session, const int64_t* prompt, int32_t length, int32_t* seq, int64_t* next,
                                      float* logits);
/** sgc_decode_step, handing back each sequence's greedy next token to `next` [count] (the argmax
 * of its logits, the first of equal ones, computed where the step runs), and the logits too when
 * `logits` is not NULL. A library compiled before these functions existed gives
 * SGC_ERROR_INVALID_ARGUMENT. */
SGC_API sgc_status sgc_decode_step_greedy(sgc_session* session, int32_t count, const int32_t* seqs, const int64_t* tokens, int64_t* next,
                                          float* logits);
/** How a sequence's next token is chosen where the step runs (sgc_seq_add_sample,
 * sgc_decode_step_sample), as Hugging Face's warpers choose it. */
typedef struct sgc_sampling {
  float temperature; /* 0: greedy (the first maximum of the logits); else a draw from softmax(logits / temperature) */
  int32_t top_k;     /* keep the top_k largest logits, and any equal to the last of them; 0: all */
  float top_p;       /* then the fewest largest whose probability reaches top_p (ties at the cut stay), in (0, 1]; 1: all */
  uint64_t seed;     /* the token after position p is a function of (seed, p, the logits) alone: reproducible,
                        whatever else the step runs */
} sgc_sampling;
/** sgc_seq_add_greedy with the token chosen by `sampling` (NULL: greedy). A temperature below 0
 * or not finite, top_k below 0 or top_p outside (0, 1] is SGC_ERROR_INVALID_ARGUMENT (nothing
 * changed); so is a library compiled before sampling existed. */
SGC_API sgc_status sgc_seq_add_sample(sgc_session* session, const int64_t* prompt, int32_t length, const sgc_sampling* sampling,
                                      int32_t* seq, int64_t* next, float* logits);
/** sgc_decode_step_greedy with each sequence's token chosen by sampling[i] (`sampling`: NULL,
 * greedy for all, or count entries), checked as sgc_seq_add_sample checks it. */
SGC_API sgc_status sgc_decode_step_sample(sgc_session* session, int32_t count, const int32_t* seqs, const int64_t* tokens,
                                          const sgc_sampling* sampling, int64_t* next, float* logits);
/** Adds `count` sequences at once (at most max_seqs): their prompts concatenated in `tokens`,
 * lengths[i] tokens each. Their prefill runs together, packed in request order into as few steps
 * as the tokens fill (a step of max_tokens rows, or the smallest token bucket that holds the
 * rest), so that many short prompts cost a few large steps. seqs[i] gets each slot; next[i]
 * (`next`: NULL, or count) each prompt's next token chosen by sampling[i] (`sampling`: NULL,
 * greedy for all, or count entries); logits + i * vocab (`logits`: NULL, or count * vocab) its
 * last token's logits. Prefixes are shared with the sequences live before the call, as
 * sgc_seq_add shares them. All or nothing: on any error, no sequence is added. */
SGC_API sgc_status sgc_seqs_add(sgc_session* session, int32_t count, const int64_t* tokens, const int32_t* lengths, const sgc_sampling* sampling,
                                int32_t* seqs, int64_t* next, float* logits);
/** Checks the cache's bookkeeping: every page free or held, reference counts equal to the block
 * tables' entries, no page leaked. SGC_ERROR_INTERNAL with what is wrong. */
SGC_API sgc_status sgc_kv_check(const sgc_session* session);

#ifdef __cplusplus
}
#endif

#endif /* SGC_SGC_H */
