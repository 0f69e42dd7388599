//! YaRN rotary scaling (transformers' `_compute_yarn_parameters`, the DeepSeek checkpoints'
//! long context): low frequencies are interpolated by `factor`, high ones kept, with a linear
//! ramp between the dimensions the `beta_fast` / `beta_slow` rotation counts pick; the rotated
//! values are scaled by an attention factor, and DeepSeek also scales the softmax by
//! `mscale(factor, mscale_all_dim)²`.

use crate::error::{Error, Result};
use serde_json::Value;

/// YaRN as one rotary table needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Yarn {
    pub inv_freq: Vec<f32>,
    /// Multiplies the rotated query and key parts (transformers scales cos and sin by it).
    pub attention_factor: f32,
    /// `mscale(factor, mscale_all_dim)²`: DeepSeek's extra softmax scale (1 without `mscale_all_dim`).
    pub softmax_scale: f32,
}

fn mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 }
}

impl Yarn {
    /// From a `rope_scaling` / `rope_parameters` object with `rope_type` "yarn", for rotary
    /// dimension `dim` and base `theta`. Errors name the missing key.
    pub fn from_params(p: &Value, theta: f32, dim: usize) -> Result<Self> {
        let num = |k: &str| p.get(k).and_then(Value::as_f64);
        let factor = num("factor").ok_or_else(|| Error::msg("config: rope_scaling (yarn) needs `factor`"))?;
        let original = num("original_max_position_embeddings")
            .ok_or_else(|| Error::msg("config: rope_scaling (yarn) needs `original_max_position_embeddings`"))?;
        let attention_factor = match (num("attention_factor"), num("mscale"), num("mscale_all_dim")) {
            (Some(a), _, _) => a,
            (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(factor, m) / mscale(factor, all),
            _ => mscale(factor, 1.0),
        };
        let softmax_scale = num("mscale_all_dim").filter(|m| *m != 0.0).map_or(1.0, |m| mscale(factor, m).powi(2));
        let beta_fast = num("beta_fast").filter(|b| *b != 0.0).unwrap_or(32.0);
        let beta_slow = num("beta_slow").filter(|b| *b != 0.0).unwrap_or(1.0);
        let truncate = p.get("truncate").and_then(Value::as_bool).unwrap_or(true);
        // The dimension whose wavelength makes `rotations` turns over the original context.
        let correction = |rotations: f64| {
            dim as f64 * (original / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * (theta as f64).ln())
        };
        let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
        if truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0) as f32, high.min(dim as f64 - 1.0) as f32);
        if low == high {
            high += 0.001; // as transformers: no division by zero
        }
        let inv_freq = (0..dim / 2)
            .map(|i| {
                let pos_freq = theta.powf((2 * i) as f32 / dim as f32);
                let (extrapolation, interpolation) = (1.0 / pos_freq, 1.0 / (factor as f32 * pos_freq));
                let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                interpolation * (1.0 - keep) + extrapolation * keep
            })
            .collect();
        Ok(Yarn { inv_freq, attention_factor: attention_factor as f32, softmax_scale: softmax_scale as f32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yarn_matches_transformers() {
        // transformers 5.24 `_compute_yarn_parameters` for head_dim 8, theta 10000, factor 4,
        // original 64 positions, mscale 1, mscale_all_dim 0.8 (the tiny DeepSeek-V2's).
        let p = json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
            "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1});
        let y = Yarn::from_params(&p, 10000.0, 8).unwrap();
        let want = [1.0f32, 0.0625, 0.0025, 0.00025];
        for (a, b) in y.inv_freq.iter().zip(want) {
            assert!((a - b).abs() <= 1e-7 * b.max(1.0), "{:?} vs {want:?}", y.inv_freq);
        }
        assert!((y.attention_factor - 1.024_958).abs() < 1e-6, "{}", y.attention_factor);
        assert!((y.softmax_scale - 1.234_107).abs() < 1e-6, "{}", y.softmax_scale);
        let e = Yarn::from_params(&json!({"rope_type": "yarn", "factor": 4.0}), 1e4, 8).unwrap_err().to_string();
        assert!(e.contains("original_max_position_embeddings"), "{e}");
    }
}
