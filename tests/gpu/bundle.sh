#!/usr/bin/env bash
# bundle.sh [BUILD] [OUT]: pack a CUDA build of moed for a GPU machine that has no Debian
# packages (a lent cloud VM: CUDA, cuBLAS and NCCL, but no libyaml, Open MPI, oneDNN, ...):
# moed, the plug-in and the test programs, every shared library they and Open MPI need
# except glibc's and CUDA's (the GPU machine's own CUDA 13 libraries are used), and Open
# MPI's, PMIx's and UCX's component trees. OUT (default BUILD/gpu-bundle.tar.xz) is
# unpacked and used by tests/gpu/run_bundle.sh on the GPU machine. A developer's tool, not
# part of the test suite: docs/tests.md#gpu.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
out=${2:-$build/gpu-bundle.tar.xz}
[[ -f $build/libmoed_cuda.so ]] || { echo "bundle.sh: $build has no libmoed_cuda.so (not a CUDA build)" >&2; exit 2; }
stage=$(mktemp -d "${TMPDIR:-/tmp}/moed-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/root/usr/bin"
cp "$build/moed" "$build/libmoed_cuda.so" "$stage/bin/"
for t in st_diff make_checkpoint test_cuda_ops test_cuda_build libmoed_test_fake_plugin.so \
         libmoed_test_other_build.so; do
  cp "$build/tests/$t" "$stage/bin/"
done
# the fake plug-in's missing library stays behind: plugin.broken needs it missing
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
         /usr/share/pmix /etc/openmpi /usr/lib/x86_64-linux-gnu/ucx; do
  if [[ -e $d ]]; then mkdir -p "$stage/root$(dirname "$d")"; cp -a "$d" "$stage/root$d"; fi
done
for b in orterun orted ompi_info; do cp -a "/usr/bin/$b" "$stage/root/usr/bin/"; done
ln -sf orterun "$stage/root/usr/bin/mpirun"
# the libraries: what ldd finds for every program and library carried, less glibc and CUDA
find "$stage/bin" "$stage/root" -type f \( -name '*.so*' -o -perm -u+x \) -print0 \
  | while IFS= read -r -d '' f; do
      if file -L "$f" | grep -q ELF; then LD_LIBRARY_PATH=$stage/bin ldd "$f" 2>/dev/null || true; fi
    done \
  | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u \
  | grep -v -E '/usr/local/cuda|/lib(c|m|pthread|dl|rt|resolv|util)\.so|/ld-linux|/moed-bundle\.' \
  | while read -r l; do cp -L "$l" "$stage/lib/"; done
tar -C "$stage" -cJf "$out" .
echo "bundle.sh: $out ($(du -h "$out" | cut -f1)), $(ls "$stage/lib" | wc -l) libraries, moed $("$build/moed" --version | head -1 | cut -d' ' -f2-4)"
