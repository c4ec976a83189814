#!/bin/sh
# GPU checks and benchmark in two halves, for a machine without a GPU and one with:
#   scripts/gpu.sh build   here: builds sgc, compiles the GPU test bundle into
#                          build/gpu-bundle and the benchmark's models into bench/out
#   scripts/gpu.sh models  here: compiles the real-model suite (tests/models, bf16,
#                          sm_90) into build/gpu-models (about 10 minutes, 28 MB)
#   scripts/gpu.sh run     on the GPU machine (the device tool), from the project
#                          root, with a part of build/gpu-bundle (part1 or part2),
#                          bench/out/*.so.xz or build/gpu-models carried (one device
#                          call carries 64 MiB with the working tree's 24 MB; each
#                          part is about 25 MB): the GPU tests, the real-model suite against
#                          PyTorch's losses, the benchmark against PyTorch, the
#                          data-parallel one and, with two GPUs or more, the
#                          scaling one (each skips what was not carried)
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
build)
  scripts/build.sh >/dev/null
  rm -rf build/gpu-bundle
  # The bundle's models are those tests/training/torch_equivalence.py exports.
  [ -f build/tests/torch-equivalence/gpt.onnx ] || (cd build && ctest -R torch_equivalence >/dev/null)
  tests/gpu/make_bundle.sh build/driver/sgc . build/tests/torch-equivalence build/gpu-bundle
  bench/gpu_build.sh build/driver/sgc
  du -sh build/gpu-bundle/part* bench/out/*.so
  ;;
models)
  scripts/build.sh >/dev/null
  # The suite's fixtures, unpacked as the real_models test unpacks them.
  [ -d build/tests/real-models ] || (cd build && ctest -R real_models >/dev/null)
  rm -rf build/gpu-models
  tests/models/gpu_build.sh build/driver/sgc build/tests/real-models build/gpu-models
  du -sh build/gpu-models
  ;;
run)
  status=0
  for part in build/gpu-bundle/part*/; do
    [ ! -f "$part/check_gpu.sh" ] || (cd "$part" && sh check_gpu.sh .) || status=1
  done
  [ ! -d build/gpu-models ] || python3 build/gpu-models/check_gpu_models.py build/gpu-models || status=1
  has() { [ -f "bench/out/$1" ] || [ -f "bench/out/$1.xz" ]; }
  ! has gpt.so || python3 bench/gpu_train.py bench/out || status=1
  ! has gpt_dp.so || python3 bench/gpu_dp.py bench/out || status=1
  if has gpt_z1r2.so && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    python3 bench/gpu_scale.py bench/out || status=1
  fi
  exit $status
  ;;
*)
  echo "usage: scripts/gpu.sh build|models|run" >&2
  exit 2
  ;;
esac
