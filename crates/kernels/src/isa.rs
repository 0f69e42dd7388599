//! Runtime choice of the instruction-set tier, made once per process.
//!
//! `VLLM_RS_ISA=scalar|avx2|avx512|neon` forces a tier (it must be supported by the CPU), so every
//! tier's kernels can be tested on one machine.

use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/VNNI (plus the AVX2 tier's requirements).
    Avx512,
    /// aarch64 NEON.
    Neon,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Scalar => "scalar",
            Tier::Avx2 => "avx2",
            Tier::Avx512 => "avx512",
            Tier::Neon => "neon",
        }
    }

    /// Whether the running CPU can execute this tier's code.
    pub fn supported(self) -> bool {
        match self {
            Tier::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => {
                Tier::Avx2.supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Tier::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every tier this CPU can run, best last.
    pub fn available() -> Vec<Tier> {
        [Tier::Scalar, Tier::Neon, Tier::Avx2, Tier::Avx512].into_iter().filter(|t| t.supported()).collect()
    }
}

static TIER: OnceLock<Tier> = OnceLock::new();

/// The best tier this CPU supports.
pub fn best() -> Tier {
    *Tier::available().last().unwrap_or(&Tier::Scalar)
}

/// The tier `VLLM_RS_ISA` asks for (if set), checked against the CPU.
fn from_env() -> Result<Tier, String> {
    match std::env::var("VLLM_RS_ISA") {
        Ok(name) => {
            let t = parse(&name).ok_or_else(|| format!("VLLM_RS_ISA={name}: expected scalar, avx2, avx512 or neon"))?;
            if !t.supported() {
                return Err(format!("VLLM_RS_ISA={name}: this CPU does not support that tier"));
            }
            Ok(t)
        }
        Err(_) => Ok(best()),
    }
}

/// Fixes the tier for the process, reporting a bad `VLLM_RS_ISA` as an error.
pub fn try_init() -> Result<Tier, String> {
    if let Some(t) = TIER.get() {
        return Ok(*t);
    }
    let t = from_env()?;
    Ok(*TIER.get_or_init(|| t))
}

/// The tier in use: forced by `VLLM_RS_ISA`, else the best the CPU supports. (A bad value was
/// reported by [`try_init`] at start-up; here it falls back to the best tier.)
pub fn tier() -> Tier {
    *TIER.get_or_init(|| from_env().unwrap_or_else(|_| best()))
}

pub fn parse(name: &str) -> Option<Tier> {
    Some(match name.to_ascii_lowercase().as_str() {
        "scalar" => Tier::Scalar,
        "avx2" => Tier::Avx2,
        "avx512" => Tier::Avx512,
        "neon" => Tier::Neon,
        _ => return None,
    })
}
