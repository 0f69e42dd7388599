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

/// HF tensor name → llama.cpp's GGUF name (llama family, with the MoE modules of Qwen2/3-MoE,
/// Mixtral and OLMoE; per-expert names map to their stacked `*_exps` tensor).
fn gguf_name(hf: &str) -> String {
    match hf {
        "model.embed_tokens.weight" => return "token_embd.weight".into(),
        "model.norm.weight" => return "output_norm.weight".into(),
        "lm_head.weight" => return "output.weight".into(),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").unwrap_or_else(|| panic!("unexpected tensor {hf}"));
    let layer = rest.split_once('.').unwrap().0;
    let suffix = hf.rsplit_once('.').unwrap().1;
    let module = layer_module(hf).unwrap();
    let module = match expert_of(module) {
        Some((_, proj)) => proj,
        None => module,
    };
    let g = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" | "block_sparse_moe.gate" => "ffn_gate_inp",
        "gate_proj" | "w1" => "ffn_gate_exps",
        "up_proj" | "w3" => "ffn_up_exps",
        "down_proj" | "w2" => "ffn_down_exps",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        other => panic!("unexpected module {other}"),
    };
    format!("blk.{layer}.{g}.{suffix}")
}

/// `model.layers.N.<module>.weight` → `<module>`.
fn layer_module(hf: &str) -> Option<&str> {
    let rest = hf.strip_prefix("model.layers.")?.split_once('.')?.1;
    Some(rest.rsplit_once('.')?.0)
}

/// `mlp.experts.3.up_proj` → `(3, "up_proj")` (Mixtral: `block_sparse_moe.experts.3.w3`).
fn expert_of(module: &str) -> Option<(usize, &str)> {
    let rest = module.strip_prefix("mlp.experts.").or_else(|| module.strip_prefix("block_sparse_moe.experts."))?;
    let (e, proj) = rest.split_once('.')?;
    Some((e.parse().ok()?, proj))
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
    tiny_gguf(dir, "llama")
}

/// A tiny F32 checkpoint as llama.cpp converts it to GGUF architecture `arch`: Q/K rows permuted
/// for `llama` only, each projection's experts stacked into one 3-D `*_exps` tensor
/// (`[experts, rows, cols]`), the shared-expert gate 1-D, and the MoE metadata.
pub fn tiny_gguf(dir: &Path, arch: &str) -> Gguf {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let u = |k: &str| config[k].as_u64().unwrap_or_else(|| panic!("config {k}")) as u32;
    let theta = config["rope_parameters"]["rope_theta"].as_f64().unwrap() as f32;
    let mut g = Gguf::default();
    let s = |x: &str| Kv::Str(x.into());
    let key = |k: &str| format!("{arch}.{k}");
    g.kv = vec![
        ("general.architecture".into(), s(arch)),
        ("general.alignment".into(), Kv::U32(ALIGN as u32)),
        (key("vocab_size"), Kv::U32(u("vocab_size"))),
        (key("context_length"), Kv::U32(u("max_position_embeddings"))),
        (key("embedding_length"), Kv::U32(u("hidden_size"))),
        (key("feed_forward_length"), Kv::U32(u("intermediate_size"))),
        (key("block_count"), Kv::U32(u("num_hidden_layers"))),
        (key("attention.head_count"), Kv::U32(u("num_attention_heads"))),
        (key("attention.head_count_kv"), Kv::U32(u("num_key_value_heads"))),
        (key("attention.layer_norm_rms_epsilon"), Kv::F32(config["rms_norm_eps"].as_f64().unwrap() as f32)),
        (key("rope.freq_base"), Kv::F32(theta)),
    ];
    for (hf, k) in [
        ("head_dim", "attention.key_length"),
        ("num_experts", "expert_count"),
        ("num_local_experts", "expert_count"),
        ("num_experts_per_tok", "expert_used_count"),
        ("moe_intermediate_size", "expert_feed_forward_length"),
        ("shared_expert_intermediate_size", "expert_shared_feed_forward_length"),
    ] {
        if config[hf].is_u64() {
            g.kv.push((key(k), Kv::U32(u(hf))));
        }
    }
    // Per-expert matrices wait here, by GGUF name, until their 3-D tensor is written.
    let mut experts: std::collections::BTreeMap<String, Vec<(usize, Tensor)>> = Default::default();
    for t in read_safetensors(&dir.join("model.safetensors")) {
        assert_eq!(t.dtype, "F32", "{}: the tiny checkpoints are float32", t.name);
        let name = gguf_name(&t.name);
        if let Some((e, _)) = layer_module(&t.name).and_then(expert_of) {
            experts.entry(name).or_default().push((e, t));
            continue;
        }
        let mut dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        if t.name.ends_with("shared_expert_gate.weight") {
            dims.truncate(1); // llama.cpp keeps it 1-D
        }
        let mut data = t.data;
        if arch == "llama" && (t.name.ends_with("q_proj.weight") || t.name.ends_with("k_proj.weight")) {
            let heads = if t.name.contains("q_proj") { u("num_attention_heads") } else { u("num_key_value_heads") };
            data = permute_rows(&data, t.shape[0], t.shape[1], heads as usize);
        }
        g.tensors.push((name, dims, 0, data));
    }
    for (name, mut parts) in experts {
        parts.sort_by_key(|(e, _)| *e);
        let shape = &parts[0].1.shape;
        let dims = vec![shape[1] as u64, shape[0] as u64, parts.len() as u64];
        g.tensors.push((name, dims, 0, parts.into_iter().flat_map(|(_, t)| t.data).collect()));
    }
    g
}

/// `g` with its matrices quantized to Q8_0 the way llama.cpp's `quantize` does: every tensor of
/// two or more dims with whole 32-blocks per row, but the MoE router (`ffn_gate_inp`), which
/// llama.cpp keeps in F32. Per block: `d = max|x| / 127`, `q = round(x / d)`, `d` stored as f16.
pub fn quantize_q8_0(g: &mut Gguf) {
    const F32: u32 = 0;
    const Q8_0: u32 = 8;
    for (name, dims, ty, data) in &mut g.tensors {
        if *ty != F32 || dims.len() < 2 || !dims[0].is_multiple_of(32) || name.contains("ffn_gate_inp") {
            continue;
        }
        let x: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let mut out = Vec::with_capacity(x.len() / 32 * 34);
        for block in x.chunks_exact(32) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
            out.extend(block.iter().map(|v| (v * id).round() as i8 as u8));
        }
        *data = out;
        *ty = Q8_0;
    }
}
