#!/usr/bin/env bash
# Arctic Inference's suffix tree (arctic-inference==0.1.1, what vLLM's `suffix` method calls) for the bench's
# "arctic suffix" rows, built into the course environment VENV (default .venv).
#
# The package ships as source only, and its own build wants torch 2.7 and CUDA for kernels the suffix tree
# does not use. This builds the suffix tree's extension alone (csrc/suffix_decoding, nanobind) in a
# throwaway build environment and copies it, with the package's unmodified suffix_decoding/*.py, into VENV.
# About a minute and a half on 2 cores, most of it pip preparing the source package. Usage: bash .ci/install-arctic-suffix.sh [VENV]
set -euo pipefail
VENV="$(cd "${1:-.venv}" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/build-env"
BPY="$WORK/build-env/bin/python"
"$BPY" -m pip install -q "nanobind==2.9.2" cmake ninja
"$BPY" -m pip download -q --no-deps --no-binary arctic-inference -d "$WORK" arctic-inference==0.1.1
tar -xzf "$WORK"/arctic_inference-0.1.1.tar.gz -C "$WORK"
SRC="$WORK/arctic_inference-0.1.1"
# the extension must match VENV's interpreter: configure with it
PATH="$WORK/build-env/bin:$PATH" cmake -S "$SRC/csrc/suffix_decoding" -B "$WORK/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$VENV/bin/python" \
  -Dnanobind_DIR="$("$BPY" -m nanobind --cmake_dir)" >/dev/null
PATH="$WORK/build-env/bin:$PATH" cmake --build "$WORK/build" -j2 >/dev/null
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DEST="$SITE/arctic_inference"
rm -rf "$DEST"
mkdir -p "$DEST/suffix_decoding"
cp "$SRC/arctic_inference/__init__.py" "$DEST/__init__.py"   # a licence header, no imports
cp "$SRC"/arctic_inference/suffix_decoding/*.py "$DEST/suffix_decoding/"
cp "$WORK"/build/_C*.so "$DEST/suffix_decoding/"
"$VENV/bin/python" -c 'from arctic_inference.suffix_decoding import SuffixDecodingCache; print("arctic suffix tree installed:", SuffixDecodingCache.__module__)'
