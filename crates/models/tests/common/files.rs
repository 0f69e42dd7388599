//! Writing checkpoint files in tests: safetensors read/write and a minimal GGUF writer, used to
//! build broken files from the tiny checkpoints and to turn a tiny safetensors model into GGUF.

use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// One tensor as stored: safetensors dtype name, shape (outermost first) and raw bytes.
#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// A fresh, empty directory for one test under cargo's per-target scratch space.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Copies an HF model directory (config.json, model.safetensors) into `dst`.
pub fn copy_model_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap_or_else(|e| panic!("{}: {e}", src.join(f).display()));
    }
}

pub fn read_safetensors(path: &Path) -> Vec<Tensor> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<Tensor> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| Tensor {
            name,
            dtype: format!("{:?}", v.dtype()),
            shape: v.shape().to_vec(),
            data: v.data().to_vec(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

pub fn write_safetensors(path: &Path, tensors: &[Tensor]) {
    let mut header = Map::new();
    let mut data = vec![];
    for t in tensors {
        let start = data.len();
        data.extend_from_slice(&t.data);
        header.insert(t.name.clone(), json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [start, data.len()]}));
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&h);
    file.extend_from_slice(&data);
    std::fs::write(path, file).unwrap();
}

/// A GGUF metadata value (the kinds these tests need).
pub enum Kv {
    U32(u32),
    F32(f32),
    Str(String),
}

/// A GGUF file to be written: metadata and tensors (GGUF dims are innermost first).
#[derive(Default)]
pub struct Gguf {
    pub kv: Vec<(String, Kv)>,
    /// name, dims (innermost first), GGML type id, bytes
    pub tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

const ALIGN: usize = 32;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Gguf {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            match v {
                Kv::U32(x) => {
                    out.extend_from_slice(&4u32.to_le_bytes());
                    out.extend_from_slice(&x.to_le_bytes());
                }
                Kv::F32(x) => {
                    out.extend_from_slice(&6u32.to_le_bytes());
                    out.extend_from_slice(&x.to_le_bytes());
                }
                Kv::Str(s) => {
                    out.extend_from_slice(&8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
            }
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = (offset + data.len()).next_multiple_of(ALIGN);
        }
        out.resize(out.len().next_multiple_of(ALIGN), 0);
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(ALIGN), 0);
        }
        out
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.to_bytes()).unwrap();
    }
}

/// HF tensor name → llama.cpp's GGUF name (llama family).
fn gguf_name(hf: &str) -> String {
    match hf {
        "model.embed_tokens.weight" => return "token_embd.weight".into(),
        "model.norm.weight" => return "output_norm.weight".into(),
        "lm_head.weight" => return "output.weight".into(),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").unwrap_or_else(|| panic!("unexpected tensor {hf}"));
    let (layer, rest) = rest.split_once('.').unwrap();
    let (module, suffix) = rest.rsplit_once('.').unwrap();
    let g = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        other => panic!("unexpected module {other}"),
    };
    format!("blk.{layer}.{g}.{suffix}")
}

/// llama.cpp's Q/K row permutation: within each head, rows `i` and `half + i` become rows `2i`
/// and `2i + 1`, so RoPE pairs are adjacent.
fn permute_rows(data: &[u8], rows: usize, cols: usize, n_head: usize) -> Vec<u8> {
    let row_bytes = cols * 4;
    let hd = rows / n_head;
    let half = hd / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_head {
        for i in 0..hd {
            let src = h * hd + if i % 2 == 0 { i / 2 } else { half + i / 2 };
            let dst = h * hd + i;
            out[dst * row_bytes..(dst + 1) * row_bytes].copy_from_slice(&data[src * row_bytes..(src + 1) * row_bytes]);
        }
    }
    out
}

/// The tiny llama checkpoint (`tests/data/tiny/llama`, F32) as llama.cpp would convert it.
pub fn tiny_llama_gguf(dir: &Path) -> Gguf {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let u = |k: &str| config[k].as_u64().unwrap_or_else(|| panic!("config {k}")) as u32;
    let theta = config["rope_parameters"]["rope_theta"].as_f64().unwrap() as f32;
    let mut g = Gguf::default();
    let s = |x: &str| Kv::Str(x.into());
    g.kv = vec![
        ("general.architecture".into(), s("llama")),
        ("general.alignment".into(), Kv::U32(ALIGN as u32)),
        ("llama.vocab_size".into(), Kv::U32(u("vocab_size"))),
        ("llama.context_length".into(), Kv::U32(u("max_position_embeddings"))),
        ("llama.embedding_length".into(), Kv::U32(u("hidden_size"))),
        ("llama.feed_forward_length".into(), Kv::U32(u("intermediate_size"))),
        ("llama.block_count".into(), Kv::U32(u("num_hidden_layers"))),
        ("llama.attention.head_count".into(), Kv::U32(u("num_attention_heads"))),
        ("llama.attention.head_count_kv".into(), Kv::U32(u("num_key_value_heads"))),
        ("llama.attention.layer_norm_rms_epsilon".into(), Kv::F32(config["rms_norm_eps"].as_f64().unwrap() as f32)),
        ("llama.rope.freq_base".into(), Kv::F32(theta)),
    ];
    for t in read_safetensors(&dir.join("model.safetensors")) {
        assert_eq!(t.dtype, "F32", "{}: the tiny checkpoints are float32", t.name);
        let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        let mut data = t.data;
        if t.name.ends_with("q_proj.weight") || t.name.ends_with("k_proj.weight") {
            let heads = if t.name.contains("q_proj") { u("num_attention_heads") } else { u("num_key_value_heads") };
            data = permute_rows(&data, t.shape[0], t.shape[1], heads as usize);
        }
        g.tensors.push((gguf_name(&t.name), dims, 0, data));
    }
    g
}
