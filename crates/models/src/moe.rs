//! The sparse mixture-of-experts feed-forward block (Qwen2/3-MoE, Mixtral, OLMoE): a router
//! scores every expert per token, each token runs through its `top_k` experts (SwiGLU MLPs, or
//! plain `act(up) → down` MLPs in Nemotron-H) and their outputs are summed, weighted by the
//! router's probabilities. Qwen2-MoE adds a shared expert that every token runs through, scaled
//! by a sigmoid gate.
//!
//! Execution is grouped by expert: one matmul per active expert over the rows routed to it
//! (gather → MLP → scale into the token's own `(token, rank)` slot), never a loop over all
//! experts per token; at batch 1 only the routed experts' weights are read. Each token's output
//! is then the sum of its slots in rank order, so it does not depend on which other tokens share
//! the batch (the matmul rows are batch-invariant too).

use crate::checkpoint::{Checkpoint, Format};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::Linear;
use crate::mlp::{Activation, FeedForward, GatedMlp, Mlp};
use serde_json::Value;
use std::ops::Range;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::backend::MatmulJob;

/// The MoE fields of a config, as the HF families spell them.
#[derive(Clone, Debug)]
pub struct MoeConfig {
    /// `num_experts` (Qwen, OLMoE) or `num_local_experts` (Mixtral).
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    /// Renormalize the top-k probabilities to sum to 1 (Mixtral always does).
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer is sparse (Qwen2/3-MoE; 1 = all).
    pub decoder_sparse_step: usize,
    /// Layers that keep a dense MLP whatever the step says (Qwen2/3-MoE).
    pub mlp_only_layers: Vec<usize>,
}

impl MoeConfig {
    /// Reads and checks the MoE keys; `norm_topk_prob` defaults to `norm_default` when absent.
    pub fn parse(config: &Value, norm_default: bool) -> Result<Self> {
        let uint = |k: &str| config.get(k).filter(|v| !v.is_null()).map(|v| v.as_u64().map(|n| n as usize));
        let bad = |k: &str| Error::msg(format!("config: {k} must be a non-negative integer"));
        let key = ["num_experts", "num_local_experts", "n_routed_experts"].into_iter().find(|k| uint(k).is_some());
        let num_experts = match key {
            Some(k) => uint(k).flatten().ok_or_else(|| bad(k))?,
            None => return Err(Error::msg("config: missing field `num_experts` (or `num_local_experts`)")),
        };
        let top_k = uint("num_experts_per_tok")
            .ok_or_else(|| Error::msg("config: missing field `num_experts_per_tok`"))?
            .ok_or_else(|| bad("num_experts_per_tok"))?;
        if num_experts == 0 || top_k == 0 || top_k > num_experts {
            return Err(Error::msg(format!(
                "config: num_experts_per_tok ({top_k}) must be between 1 and the number of experts ({num_experts})"
            )));
        }
        let step = uint("decoder_sparse_step").unwrap_or(Some(1)).ok_or_else(|| bad("decoder_sparse_step"))?;
        if step == 0 {
            return Err(Error::msg("config: decoder_sparse_step must be at least 1"));
        }
        let mlp_only_layers = match config.get("mlp_only_layers").filter(|v| !v.is_null()) {
            None => vec![],
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|_| Error::msg("config: mlp_only_layers must be a list of layer indices"))?,
        };
        let norm_topk_prob = match config.get("norm_topk_prob").filter(|v| !v.is_null()) {
            None => norm_default,
            Some(v) => v.as_bool().ok_or_else(|| Error::msg("config: norm_topk_prob must be true or false"))?,
        };
        Ok(MoeConfig {
            num_experts,
            num_experts_per_tok: top_k,
            norm_topk_prob,
            decoder_sparse_step: step,
            mlp_only_layers,
        })
    }

    /// Whether layer `i` is sparse (transformers' Qwen2/3-MoE rule).
    pub fn is_sparse(&self, i: usize) -> bool {
        !self.mlp_only_layers.contains(&i) && (i + 1).is_multiple_of(self.decoder_sparse_step)
    }
}

/// Where a family keeps its MoE tensors under a layer's prefix.
#[derive(Clone, Copy, Debug)]
pub struct MoeNames {
    /// The block's module (`mlp`; Mixtral: `block_sparse_moe`).
    pub block: &'static str,
    /// Expert projections gate, up, down (Mixtral: `w1`, `w3`, `w2`).
    pub proj: [&'static str; 3],
}

/// The names of Qwen, OLMoE, and of any family read from GGUF (the loader maps `*_exps` there).
pub const MOE_NAMES: MoeNames = MoeNames { block: "mlp", proj: ["gate_proj", "up_proj", "down_proj"] };

/// One expert's MLP: SwiGLU (most families) or `act(up)` → down (Nemotron-H's `relu²`).
pub enum Expert {
    Gated(GatedMlp),
    Plain(Mlp),
}

impl Expert {
    /// The width of the hidden layer (the first projections' rows).
    fn inter(&self) -> usize {
        match self {
            Expert::Gated(mlp) => mlp.gate_proj.weight.rows,
            Expert::Plain(mlp) => mlp.fc1.weight.rows,
        }
    }

    /// The second projection (`down_proj` or `fc2`).
    fn second(&self) -> &Linear {
        match self {
            Expert::Gated(mlp) => &mlp.down_proj,
            Expert::Plain(mlp) => &mlp.fc2,
        }
    }

    /// What follows the first projections' matmuls, as in [`Expert::forward`]
    /// ([`GatedMlp::activate`], [`Mlp::activate`]): the second projection's input is left in
    /// `g` (`u`, the up projection's output, is unused by plain experts).
    fn activate(&self, be: &dyn Backend, g: &mut [f32], u: &mut [f32]) {
        match self {
            Expert::Gated(mlp) => mlp.activate(be, g, u),
            Expert::Plain(mlp) => mlp.activate(be, g),
        }
    }

    /// What follows the second projection's matmul: its bias and the output scale.
    fn finish(&self, be: &dyn Backend, y: &mut [f32]) {
        match self {
            Expert::Gated(mlp) => mlp.finish(be, y),
            Expert::Plain(mlp) => mlp.fc2.add_bias(be, y),
        }
    }

    /// Writes `m × hidden` into `out`, using `gate` and `up` as scratch.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        m: usize,
        gate: &mut Vec<f32>,
        up: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) {
        match self {
            Expert::Gated(mlp) => mlp.forward(be, x, m, gate, up, out),
            Expert::Plain(mlp) => mlp.forward(be, x, m, gate, out),
        }
    }
}

/// An always-on expert: `mlp(x)`, scaled by `sigmoid(gate · x)` where it has a gate (Qwen2-MoE;
/// DeepSeek's and Nemotron-H's shared experts have none).
pub struct SharedExpert {
    pub mlp: Expert,
    pub gate: Option<Linear>,
}

impl SharedExpert {
    /// `{prefix}.{module}` (`inter` wide) and, if `gate` names one, its `hidden → 1` gate.
    pub fn load(
        ck: &Checkpoint,
        prefix: &str,
        module: &str,
        hidden: usize,
        inter: usize,
        gate: Option<&str>,
    ) -> Result<Self> {
        Ok(SharedExpert {
            mlp: Expert::Gated(GatedMlp::load(ck, &format!("{prefix}.{module}"), hidden, inter, Activation::Silu)?),
            gate: gate.map(|g| Linear::load(ck, &format!("{prefix}.{g}"), 1, hidden, false)).transpose()?,
        })
    }
}

/// DeepSeek's group-limited routing: experts form `n_group` equal groups; a token only picks
/// among the `topk_group` groups that score highest.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimit {
    pub n_group: usize,
    pub topk_group: usize,
    pub score: GroupScore,
}

impl GroupLimit {
    /// `n_group` and `topk_group` of `config` (1 when absent), checked against `num_experts`.
    pub fn parse(config: &Value, num_experts: usize, score: GroupScore) -> Result<Self> {
        let uint = |k: &str| config.get(k).filter(|v| !v.is_null()).map_or(Ok(1), |_| config_usize(config, k));
        let g = GroupLimit { n_group: uint("n_group")?, topk_group: uint("topk_group")?, score };
        if g.n_group == 0 || !num_experts.is_multiple_of(g.n_group) || g.topk_group == 0 || g.topk_group > g.n_group {
            return Err(Error::msg(format!(
                "config: n_group ({}) must divide the {num_experts} experts and topk_group ({}) be between 1 and \
                 n_group",
                g.n_group, g.topk_group
            )));
        }
        Ok(g)
    }
}

/// What a group scores: its best expert (V2's `group_limited_greedy`), or its best two
/// together (V3's `noaux_tc`).
#[derive(Clone, Copy, Debug)]
pub enum GroupScore {
    Max,
    SumTop2,
}

/// How router logits become expert scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    Softmax,
    /// Each expert's own sigmoid (DeepSeek-V3).
    Sigmoid,
    /// The top-k chosen by raw logit, weighted by a softmax over their logits alone (gpt-oss).
    TopKSoftmax,
}

pub struct SparseMoe {
    /// The router: `hidden → num_experts` logits.
    pub gate: Linear,
    pub experts: Vec<Expert>,
    pub top_k: usize,
    pub norm_topk_prob: bool,
    pub scoring: Scoring,
    /// Added to the scores for choosing experts only, not to their weights (DeepSeek-V3).
    pub correction_bias: Option<Vec<f32>>,
    /// Multiplies the routing weights after any renormalization (DeepSeek), 1 for none.
    pub routed_scaling_factor: f32,
    pub group_limit: Option<GroupLimit>,
    pub shared_expert: Option<SharedExpert>,
}

/// Scratch of [`SparseMoe::forward`], kept in the model's workspace.
#[derive(Default)]
pub struct MoeBuffers {
    logits: Vec<f32>,
    /// `(expert, weight)` of every `(token, rank)` slot.
    routes: Vec<(usize, f32)>,
    choice: Choice,
    /// Slots grouped by expert (in token order within an expert), and where each group starts.
    order: Vec<usize>,
    starts: Vec<usize>,
    /// Where each expert's next slot goes while `order` is filled.
    next: Vec<usize>,
    rows: Vec<f32>,
    out: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// Each slot's weighted expert output, `tokens × top_k × hidden`.
    slots: Vec<f32>,
}

/// The feed-forward builder of `llama::load_with` for a MoE family: layer `i` gets the sparse
/// block (experts `expert_inter` wide) where `c` makes it sparse, else a dense SwiGLU MLP
/// `dense_inter` wide (`{prefix}.mlp`).
pub fn layer_ffn<'a>(
    ck: &'a Checkpoint,
    c: MoeConfig,
    names: MoeNames,
    hidden: usize,
    [dense_inter, expert_inter]: [usize; 2],
) -> impl Fn(usize, &str, Activation) -> Result<FeedForward> + 'a {
    move |i, prefix, act| {
        if act != Activation::Silu {
            return Err(Error::msg(format!("config: hidden_act {act:?} is not supported for experts")));
        }
        // GGUF metadata does not say which layers are dense (llama.cpp's MoE families have
        // none): there a layer is sparse when it has a router.
        let sparse = match ck.format {
            Format::Gguf => ck.contains(&format!("{prefix}.{}.gate.weight", names.block)),
            Format::Safetensors => c.is_sparse(i),
        };
        Ok(if sparse {
            FeedForward::Moe(Box::new(SparseMoe::load(ck, prefix, names, &c, hidden, expert_inter)?))
        } else {
            FeedForward::Gated(GatedMlp::load(ck, &format!("{prefix}.mlp"), hidden, dense_inter, act)?)
        })
    }
}

/// The MoE config keys of a GGUF file (`{arch}.expert_count`, …), added to its translated config;
/// `norm_topk_prob` is the family's fixed choice in llama.cpp unless the file says otherwise.
pub fn config_from_gguf(g: &GgufFile, c: &mut Value, norm_topk_prob: bool) -> Result<()> {
    let arch = g.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    c["num_experts"] = g.require_u64(&key("expert_count"))?.into();
    c["num_experts_per_tok"] = g.require_u64(&key("expert_used_count"))?.into();
    for (k, hf) in [
        ("expert_feed_forward_length", "moe_intermediate_size"),
        ("expert_shared_feed_forward_length", "shared_expert_intermediate_size"),
    ] {
        if let Some(n) = g.get_u64(&key(k)) {
            c[hf] = n.into();
        }
    }
    let norm = g.get(&key("expert_weights_norm")).and_then(|v| v.as_bool()).unwrap_or(norm_topk_prob);
    c["norm_topk_prob"] = norm.into();
    Ok(())
}

/// `routed_scaling_factor` (DeepSeek, Nemotron-H), 1 when absent.
pub fn routed_scaling_factor(config: &Value) -> Result<f32> {
    crate::config::multiplier(config, "routed_scaling_factor")
}

/// A required integer config key.
pub fn config_usize(config: &Value, key: &str) -> Result<usize> {
    config
        .get(key)
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .ok_or_else(|| Error::msg(format!("config: missing field `{key}` (a non-negative integer)")))
}

/// Projection `proj` of the `n` experts under `p`, ready for matmul: `down` ones are
/// `hidden × inter`, the others `inter × hidden`; from the 3-D `{p}.experts.{proj}.weight` of
/// GGUF, or `{p}.experts.N.{proj}.weight` each.
fn expert_linears(
    ck: &Checkpoint,
    p: &str,
    proj: &str,
    n: usize,
    hidden: usize,
    inter: usize,
    down: bool,
) -> Result<Vec<Linear>> {
    let (rows, cols) = if down { (hidden, inter) } else { (inter, hidden) };
    let fused = format!("{p}.experts.{proj}.weight");
    let weights = if ck.contains(&fused) {
        ck.experts(&fused, n, rows, cols)?
    } else {
        (0..n).map(|e| ck.matrix(&format!("{p}.experts.{e}.{proj}.weight"), rows, cols)).collect::<Result<_>>()?
    };
    Ok(weights.into_iter().map(|w| Linear { weight: w.for_matmul(), bias: None }).collect())
}

/// One token's expert choice: its scores, its groups' scores, what was picked.
#[derive(Default)]
struct Choice {
    scores: Vec<f32>,
    groups: Vec<f32>,
    picked: Vec<usize>,
    /// The picked experts' weights before any renormalization.
    weights: Vec<f32>,
}

impl SparseMoe {
    /// Loads layer `prefix`'s block (`{prefix}.{block}.gate`, `.experts.N.{proj}` or the 3-D
    /// `.experts.{proj}` of GGUF), SwiGLU experts `inter` wide.
    pub fn load(
        ck: &Checkpoint,
        prefix: &str,
        names: MoeNames,
        c: &MoeConfig,
        hidden: usize,
        inter: usize,
    ) -> Result<Self> {
        let p = format!("{prefix}.{}", names.block);
        let [g, u, d] =
            names.proj.map(|proj| expert_linears(ck, &p, proj, c.num_experts, hidden, inter, proj == names.proj[2]));
        let experts = g?
            .into_iter()
            .zip(u?)
            .zip(d?)
            .map(|((gate_proj, up_proj), down_proj)| {
                Expert::Gated(GatedMlp { gate_proj, up_proj, down_proj, act: Activation::Silu, scales: [1.0, 1.0] })
            })
            .collect();
        Self::routing(ck, &p, c, hidden, experts)
    }

    /// [`SparseMoe::load`] for plain experts: `act(up_proj)` → `down_proj` (Nemotron-H).
    pub fn load_plain(
        ck: &Checkpoint,
        p: &str,
        c: &MoeConfig,
        [hidden, inter]: [usize; 2],
        act: Activation,
    ) -> Result<Self> {
        let n = c.num_experts;
        let up = expert_linears(ck, p, "up_proj", n, hidden, inter, false)?;
        let down = expert_linears(ck, p, "down_proj", n, hidden, inter, true)?;
        let experts = up.into_iter().zip(down).map(|(fc1, fc2)| Expert::Plain(Mlp { fc1, fc2, act })).collect();
        Self::routing(ck, p, c, hidden, experts)
    }

    /// The block around `experts`: the router `{p}.gate` and softmax top-k routing (families
    /// change the rest after loading).
    fn routing(ck: &Checkpoint, p: &str, c: &MoeConfig, hidden: usize, experts: Vec<Expert>) -> Result<Self> {
        Ok(SparseMoe {
            gate: Linear::load(ck, &format!("{p}.gate"), c.num_experts, hidden, false)?,
            experts,
            top_k: c.num_experts_per_tok,
            norm_topk_prob: c.norm_topk_prob,
            scoring: Scoring::Softmax,
            correction_bias: None,
            routed_scaling_factor: 1.0,
            group_limit: None,
            shared_expert: None,
        })
    }

    /// Writes `m × hidden` into `out`.
    pub fn forward(&self, be: &dyn Backend, x: &[f32], m: usize, b: &mut MoeBuffers, out: &mut Vec<f32>) {
        let hidden = x.len() / m.max(1);
        self.route(be, x, m, b);
        self.run_experts(be, x, hidden, b);
        // Each token's slots summed in rank order: the same additions whatever the batch.
        out.resize(m * hidden, 0.0);
        for (o, slots) in out.chunks_exact_mut(hidden).zip(b.slots.chunks_exact(self.top_k * hidden)) {
            o.copy_from_slice(&slots[..hidden]);
            slots[hidden..].chunks_exact(hidden).for_each(|s| be.add_assign(o, s));
        }
        if let Some(shared) = &self.shared_expert {
            shared.mlp.forward(be, x, m, &mut b.gate, &mut b.up, &mut b.out);
            match &shared.gate {
                Some(gate) => {
                    gate.forward(be, x, m, &mut b.logits);
                    for ((o, s), g) in out.chunks_exact_mut(hidden).zip(b.out.chunks_exact(hidden)).zip(&b.logits) {
                        let scale = 1.0 / (1.0 + (-g).exp());
                        o.iter_mut().zip(s).for_each(|(o, s)| *o += scale * s);
                    }
                }
                None => be.add_assign(out, &b.out),
            }
        }
    }

    /// Router scores (softmax over all experts, sigmoids, or the raw logits), the experts
    /// [`SparseMoe::choose`] picks (highest first, the lower index on ties) weighted by their
    /// scores (or by a softmax over the picked logits), optionally renormalized, then scaled;
    /// then the slots grouped by expert.
    fn route(&self, be: &dyn Backend, x: &[f32], m: usize, b: &mut MoeBuffers) {
        let n = self.experts.len();
        self.gate.forward(be, x, m, &mut b.logits);
        b.routes.clear();
        for probs in b.logits.chunks_exact_mut(n) {
            match self.scoring {
                Scoring::Softmax => be.softmax(probs),
                Scoring::Sigmoid => probs.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
                Scoring::TopKSoftmax => {}
            }
            let start = b.routes.len();
            let c = &mut b.choice;
            self.choose(be, probs, c);
            c.weights.clear();
            c.weights.extend(c.picked.iter().map(|&e| probs[e]));
            if self.scoring == Scoring::TopKSoftmax {
                be.softmax(&mut c.weights);
            }
            b.routes.extend(c.picked.iter().copied().zip(c.weights.iter().copied()));
            let routes = &mut b.routes[start..];
            if self.norm_topk_prob {
                let sum: f32 = routes.iter().map(|r| r.1).sum();
                routes.iter_mut().for_each(|r| r.1 /= sum);
            }
            routes.iter_mut().for_each(|r| r.1 *= self.routed_scaling_factor);
        }
        // Counting sort of the slots by expert.
        b.starts.clear();
        b.starts.resize(n + 1, 0);
        for &(e, _) in &b.routes {
            b.starts[e + 1] += 1;
        }
        for e in 0..n {
            b.starts[e + 1] += b.starts[e];
        }
        b.order.resize(b.routes.len(), 0);
        b.next.clone_from(&b.starts);
        for (slot, &(e, _)) in b.routes.iter().enumerate() {
            b.order[b.next[e]] = slot;
            b.next[e] += 1;
        }
    }

    /// A token's `top_k` experts by score (plus the correction bias, DeepSeek-V3), among the
    /// experts of its best groups where routing is group-limited.
    /// The result is `c.picked`.
    fn choose(&self, be: &dyn Backend, scores: &[f32], c: &mut Choice) {
        c.scores.clear();
        c.scores.extend_from_slice(scores);
        if let Some(bias) = &self.correction_bias {
            be.add_assign(&mut c.scores, bias);
        }
        if let Some(g) = self.group_limit {
            let size = c.scores.len() / g.n_group;
            c.groups.clear();
            c.groups.extend(c.scores.chunks_exact(size).map(|s| match g.score {
                GroupScore::Max => s.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                GroupScore::SumTop2 => top2_sum(s),
            }));
            top_k(&c.groups, g.topk_group, &mut c.picked);
            for (gi, s) in c.scores.chunks_exact_mut(size).enumerate() {
                if !c.picked.contains(&gi) {
                    s.fill(f32::NEG_INFINITY);
                }
            }
        }
        top_k(&c.scores, self.top_k, &mut c.picked);
    }

    /// For each expert with routed slots: its tokens' rows through its MLP in one batch, each
    /// result scaled by the slot's weight into the slot. Experts go in waves of up to
    /// [`WAVE_SLOTS`] slots (at least one expert each), and each wave's matmuls as one kernel job
    /// per stage ([`Backend::matmul_jobs`]): a decode step's few rows per expert then cost one
    /// pool start and join per stage, not two per expert, while the scratch stays bounded.
    fn run_experts(&self, be: &dyn Backend, x: &[f32], hidden: usize, b: &mut MoeBuffers) {
        b.slots.resize(b.routes.len() * hidden, 0.0);
        let n = self.experts.len();
        let mut e0 = 0;
        while e0 < n {
            let mut e1 = e0 + 1;
            while e1 < n && b.starts[e1 + 1] - b.starts[e0] <= WAVE_SLOTS {
                e1 += 1;
            }
            self.run_wave(be, x, hidden, e0..e1, b);
            e0 = e1;
        }
    }

    /// [`SparseMoe::run_experts`] for experts `es`: their slots' rows gathered, the first
    /// projections (gate and up, or `fc1`) of all of them as one job, each expert's bias,
    /// scale and activation, the second projections as one job, then each slot weighted.
    fn run_wave(&self, be: &dyn Backend, x: &[f32], hidden: usize, es: Range<usize>, b: &mut MoeBuffers) {
        let (k, s0) = (self.top_k, b.starts[es.start]);
        let order = &b.order[s0..b.starts[es.end]];
        // Experts share one width (their 3-D tensor's, or the config's).
        let inter = self.experts[es.start].inter();
        b.rows.clear();
        for &slot in order {
            b.rows.extend_from_slice(&x[slot / k * hidden..][..hidden]);
        }
        for v in [&mut b.gate, &mut b.up] {
            v.resize(order.len() * inter, 0.0);
        }
        b.out.resize(order.len() * hidden, 0.0);
        // The slots of expert `e`, counted from the wave's first.
        let span = |e: usize| b.starts[e] - s0..b.starts[e + 1] - s0;
        let active: Vec<usize> = es.filter(|&e| !span(e).is_empty()).collect();
        let mut jobs = vec![];
        let (mut gate, mut up) = (&mut b.gate[..], &mut b.up[..]);
        for &e in &active {
            let (r, m) = (span(e), span(e).len());
            let xs = &b.rows[r.start * hidden..r.end * hidden];
            let (g, rest) = std::mem::take(&mut gate).split_at_mut(m * inter);
            gate = rest;
            let (u, rest) = std::mem::take(&mut up).split_at_mut(m * inter);
            up = rest;
            match &self.experts[e] {
                Expert::Gated(mlp) => {
                    jobs.push(MatmulJob { x: xs, m, w: &mlp.gate_proj.weight, out: g });
                    jobs.push(MatmulJob { x: xs, m, w: &mlp.up_proj.weight, out: u });
                }
                Expert::Plain(mlp) => jobs.push(MatmulJob { x: xs, m, w: &mlp.fc1.weight, out: g }),
            }
        }
        be.matmul_jobs(&mut jobs);
        for &e in &active {
            let r = span(e);
            let u = &mut b.up[r.start * inter..r.end * inter];
            self.experts[e].activate(be, &mut b.gate[r.start * inter..r.end * inter], u);
        }
        let mut jobs = vec![];
        let mut out = &mut b.out[..];
        for &e in &active {
            let (r, m) = (span(e), span(e).len());
            let (o, rest) = std::mem::take(&mut out).split_at_mut(m * hidden);
            out = rest;
            let xs = &b.gate[r.start * inter..r.end * inter];
            jobs.push(MatmulJob { x: xs, m, w: &self.experts[e].second().weight, out: o });
        }
        be.matmul_jobs(&mut jobs);
        for &e in &active {
            let r = span(e);
            self.experts[e].finish(be, &mut b.out[r.start * hidden..r.end * hidden]);
        }
        for (&slot, y) in order.iter().zip(b.out.chunks_exact(hidden)) {
            let w = b.routes[slot].1;
            let dst = &mut b.slots[slot * hidden..(slot + 1) * hidden];
            dst.iter_mut().zip(y).for_each(|(d, y)| *d = w * y);
        }
    }
}

/// Slots an expert wave of [`SparseMoe::run_experts`] takes at most (unless one expert has
/// more): a decode step of 64 requests at top-8 is one wave; a prefill chunk is many, each
/// hundreds of rows, so the gathered rows and intermediates stay a few MiB.
const WAVE_SLOTS: usize = 512;

/// The indices of the `k` largest values, highest first (the lower index on ties).
fn top_k(x: &[f32], k: usize, picked: &mut Vec<usize>) {
    picked.clear();
    for _ in 0..k.min(x.len()) {
        let best = (0..x.len()).filter(|i| !picked.contains(i)).reduce(|b, i| if x[i] > x[b] { i } else { b });
        picked.extend(best);
    }
}

/// The largest value plus the second largest (torch's `topk(2).sum()`).
fn top2_sum(x: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in x {
        if v > a {
            (a, b) = (v, a);
        } else if v > b {
            b = v;
        }
    }
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use vllm_rs_kernels::Weight;

    #[test]
    fn sparse_layers_follow_step_and_mlp_only_layers() {
        let c = MoeConfig::parse(
            &json!({"num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3]}),
            false,
        )
        .unwrap();
        let sparse: Vec<usize> = (0..6).filter(|&i| c.is_sparse(i)).collect();
        assert_eq!(sparse, [1, 5]);
        let mixtral = MoeConfig::parse(&json!({"num_local_experts": 8, "num_experts_per_tok": 2}), true).unwrap();
        assert!((0..4).all(|i| mixtral.is_sparse(i)) && mixtral.norm_topk_prob && mixtral.num_experts == 8);
    }

    #[test]
    fn bad_moe_configs_name_the_key() {
        for (c, key) in [
            (json!({"num_experts": 4, "num_experts_per_tok": 5}), "num_experts_per_tok (5)"),
            (json!({"num_experts": 4, "num_experts_per_tok": 0}), "num_experts_per_tok (0)"),
            (json!({"num_experts_per_tok": 2}), "num_experts"),
            (json!({"num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 0}), "decoder_sparse_step"),
            (json!({"num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": "all"}), "mlp_only_layers"),
        ] {
            let e = MoeConfig::parse(&c, false).unwrap_err().to_string();
            assert!(e.contains(key), "{e} does not name {key}");
        }
    }

    /// Random expert weights, `n` experts of width `inter` over `hidden`.
    fn random_moe(n: usize, k: usize, hidden: usize, inter: usize) -> SparseMoe {
        let mut seed = 0x9e37_79b9_u32;
        let mut rand = |rows: usize, cols: usize| {
            let v: Vec<f32> = (0..rows * cols)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as f32 / u32::MAX as f32 - 0.5
                })
                .collect();
            Linear { weight: Weight::from_f32(rows, cols, &v).for_matmul(), bias: None }
        };
        let experts = (0..n)
            .map(|_| {
                Expert::Gated(GatedMlp {
                    gate_proj: rand(inter, hidden),
                    up_proj: rand(inter, hidden),
                    down_proj: rand(hidden, inter),
                    act: Activation::Silu,
                    scales: [1.0, 1.0],
                })
            })
            .collect();
        SparseMoe {
            gate: rand(n, hidden),
            experts,
            top_k: k,
            norm_topk_prob: true,
            scoring: Scoring::Softmax,
            correction_bias: None,
            routed_scaling_factor: 1.0,
            group_limit: None,
            shared_expert: None,
        }
    }

    #[test]
    fn grouped_execution_equals_per_token_reference_and_is_batch_invariant() {
        check_against_per_token(&random_moe(6, 2, 16, 8), 16, 9);
    }

    /// Quantized experts (packed for the AVX-512 kernels, where the waves' matmuls are one
    /// job each) over 300 tokens at top-2: 600 slots, more than one wave.
    #[test]
    fn quantized_experts_in_several_waves_equal_the_per_token_reference() {
        use vllm_rs_kernels::{GgmlType, testing::quantize_random};
        let (n, hidden, inter) = (6, 64, 32);
        let mut seed = 0;
        let mut q = |rows, cols| {
            seed += 1;
            Linear { weight: quantize_random(GgmlType::Q8_0, rows, cols, seed).for_matmul(), bias: None }
        };
        let mut moe = random_moe(n, 2, hidden, inter);
        moe.experts = (0..n)
            .map(|_| {
                let (gate_proj, up_proj, down_proj) = (q(inter, hidden), q(inter, hidden), q(hidden, inter));
                Expert::Gated(GatedMlp { gate_proj, up_proj, down_proj, act: Activation::Silu, scales: [1.0, 1.0] })
            })
            .collect();
        const { assert!(300 * 2 > WAVE_SLOTS) };
        check_against_per_token(&moe, hidden, 300);
    }

    /// `moe` over `m` tokens against each token through its top-k experts alone (every
    /// probability, a full sort), and each token alone against its row of the batch, bit for bit.
    fn check_against_per_token(moe: &SparseMoe, hidden: usize, m: usize) {
        let (n, k) = (moe.experts.len(), moe.top_k);
        let x: Vec<f32> = (0..m * hidden).map(|i| ((i * 7 % 23) as f32 - 11.0) / 7.0).collect();
        let mut b = MoeBuffers::default();
        let mut batch = vec![];
        let be = vllm_rs_kernels::backend::default();
        moe.forward(be, &x, m, &mut b, &mut batch);
        // Per token: every expert's probability, the top k by a full sort, each expert alone.
        for t in 0..m {
            let row = &x[t * hidden..(t + 1) * hidden];
            let mut logits = vec![];
            moe.gate.forward(be, row, 1, &mut logits);
            be.softmax(&mut logits);
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]));
            let sum: f32 = idx[..k].iter().map(|&e| logits[e]).sum();
            let mut want = vec![0f32; hidden];
            let (mut g, mut u, mut y) = (vec![], vec![], vec![]);
            for &e in &idx[..k] {
                moe.experts[e].forward(be, row, 1, &mut g, &mut u, &mut y);
                want.iter_mut().zip(&y).for_each(|(w, y)| *w += logits[e] / sum * y);
            }
            let got = &batch[t * hidden..(t + 1) * hidden];
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let scale = want.iter().fold(1f32, |s, w| s.max(w.abs()));
            assert!(err < 1e-5 * scale, "token {t}: grouped MoE differs from the per-token reference by {err}");
            // Alone, the token's output is bit-identical to its row in the batch.
            let mut alone = vec![];
            moe.forward(be, row, 1, &mut b, &mut alone);
            assert_eq!(alone, got, "token {t}: output depends on the other tokens in the batch");
        }
    }
}
