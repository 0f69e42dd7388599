//! What each layer keeps per request, and how layers with the same needs form groups
//! (vLLM v1's `kv_cache_interface.py` and its grouping of layers by spec).
//!
//! A layer declares a [`KvCacheSpec`]; layers with equal specs form a [`KvCacheGroup`]; each
//! group keeps one block table per request (or one state slot, for recurrent layers). When every
//! paged group has the same page size, groups are cut to the same number of layers and the
//! groups' `i`-th layers share one tensor (a block id belongs to one group at a time), so a
//! sliding-window group that frees old blocks really gives memory back to the full-attention
//! layers (vLLM's hybrid allocator). Sizes here are in elements; the engine multiplies by the
//! cache dtype's bytes.

/// What one layer caches for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvCacheSpec {
    /// K and V of every position.
    FullAttention { num_kv_heads: usize, head_dim: usize },
    /// K and V of the last `window` positions only (older blocks are freed).
    SlidingWindow { num_kv_heads: usize, head_dim: usize, window: usize },
    /// Multi-head latent attention: one compressed latent plus the decoupled rope key per
    /// position, shared by every head (no separate V).
    Mla { kv_lora_rank: usize, qk_rope_head_dim: usize },
    /// A fixed-size state per request (Mamba, gated delta-net, short convolutions), whatever
    /// the length: `state_elements` in all.
    Recurrent { state_elements: usize },
}

impl KvCacheSpec {
    /// Elements one position takes (0 for recurrent layers, which hold no per-position data).
    pub fn elements_per_token(&self) -> usize {
        match *self {
            KvCacheSpec::FullAttention { num_kv_heads, head_dim }
            | KvCacheSpec::SlidingWindow { num_kv_heads, head_dim, .. } => 2 * num_kv_heads * head_dim,
            KvCacheSpec::Mla { kv_lora_rank, qk_rope_head_dim } => kv_lora_rank + qk_rope_head_dim,
            KvCacheSpec::Recurrent { .. } => 0,
        }
    }

    /// Elements one position keeps in the K rows and in the V rows of its tensor: MLA keeps
    /// its latent and rope key as one K row and no V (attention reads values from K's rows).
    pub fn row_elements(&self) -> [usize; 2] {
        match *self {
            KvCacheSpec::Mla { .. } => [self.elements_per_token(), 0],
            _ => [self.elements_per_token() / 2; 2],
        }
    }

    /// Elements of one block of `block_size` positions for one layer.
    pub fn page_elements(&self, block_size: usize) -> usize {
        block_size * self.elements_per_token()
    }

    /// The same layer keeping every position (vLLM's `--disable-hybrid-kv-cache-manager`: a
    /// window still limits what attention reads, but its blocks are kept).
    pub fn without_window(self) -> Self {
        match self {
            KvCacheSpec::SlidingWindow { num_kv_heads, head_dim, .. } => {
                KvCacheSpec::FullAttention { num_kv_heads, head_dim }
            }
            other => other,
        }
    }

    /// Elements of one request's state (0 for paged layers).
    pub fn state_elements(&self) -> usize {
        match *self {
            KvCacheSpec::Recurrent { state_elements } => state_elements,
            _ => 0,
        }
    }

    /// Whether the layer keeps blocks (everything but recurrent state).
    pub fn is_paged(&self) -> bool {
        !matches!(self, KvCacheSpec::Recurrent { .. })
    }

    /// The most blocks one request can hold in this layer at once: a window needs its
    /// positions plus the step's new tokens (and one block of slack for misalignment).
    pub fn max_blocks_per_request(&self, block_size: usize, max_model_len: usize, max_step_tokens: usize) -> usize {
        match *self {
            KvCacheSpec::SlidingWindow { window, .. } => {
                let tokens = (window - 1 + max_step_tokens).min(max_model_len);
                tokens.div_ceil(block_size) + 1
            }
            KvCacheSpec::Recurrent { .. } => 0,
            _ => max_model_len.div_ceil(block_size),
        }
    }
}

/// Layers that share a spec and so one block table per request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCacheGroup {
    pub spec: KvCacheSpec,
    /// Model layer indices, in order.
    pub layers: Vec<usize>,
}

/// How the layers of a model are grouped, and where each layer's storage lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCacheLayout {
    pub groups: Vec<KvCacheGroup>,
    /// For each model layer: its group, and the storage tensor it reads and writes (paged
    /// layers) or its state tensor (recurrent layers).
    pub layer_group: Vec<usize>,
    pub layer_tensor: Vec<usize>,
    /// Element count of one page of each paged tensor (one layer's block).
    pub tensor_page_elements: Vec<usize>,
    /// Element count of each recurrent state tensor, per request slot.
    pub state_tensor_elements: Vec<usize>,
}

impl KvCacheLayout {
    /// `num_layers` full-attention layers alike (one group).
    pub fn uniform(num_layers: usize, spec: KvCacheSpec, block_size: usize) -> Self {
        KvCacheLayout::new(&vec![spec; num_layers], block_size)
    }

    /// Groups `specs` (one per layer). Paged layers with equal specs form a group; when all
    /// paged specs have one page size and there is more than one such spec, each spec's layers
    /// are cut into groups of the smallest spec's layer count and the `i`-th layer of every
    /// group shares tensor `i` (vLLM's hybrid layout); otherwise every paged layer has its own
    /// tensor. Recurrent layers (grouped by equal spec too) have a state tensor each.
    pub fn new(specs: &[KvCacheSpec], block_size: usize) -> Self {
        let mut by_spec: Vec<(KvCacheSpec, Vec<usize>)> = Vec::new();
        for (layer, spec) in specs.iter().enumerate() {
            match by_spec.iter_mut().find(|(s, _)| s == spec) {
                Some((_, layers)) => layers.push(layer),
                None => by_spec.push((*spec, vec![layer])),
            }
        }
        let paged: Vec<&(KvCacheSpec, Vec<usize>)> = by_spec.iter().filter(|(s, _)| s.is_paged()).collect();
        let uniform_page =
            paged.windows(2).all(|w| w[0].0.page_elements(block_size) == w[1].0.page_elements(block_size));
        let share = paged.len() > 1 && uniform_page;
        let group_size = if share { paged.iter().map(|(_, l)| l.len()).min().unwrap_or(1) } else { usize::MAX };
        let n = specs.len();
        let mut layout = KvCacheLayout {
            groups: Vec::new(),
            layer_group: vec![0; n],
            layer_tensor: vec![0; n],
            tensor_page_elements: Vec::new(),
            state_tensor_elements: Vec::new(),
        };
        for (spec, layers) in &by_spec {
            for chunk in layers.chunks(group_size.min(layers.len())) {
                let g = layout.groups.len();
                for (i, &layer) in chunk.iter().enumerate() {
                    layout.layer_group[layer] = g;
                    layout.layer_tensor[layer] = match spec {
                        KvCacheSpec::Recurrent { state_elements } => {
                            layout.state_tensor_elements.push(*state_elements);
                            layout.state_tensor_elements.len() - 1
                        }
                        _ if share => {
                            if layout.tensor_page_elements.len() <= i {
                                layout.tensor_page_elements.push(spec.page_elements(block_size));
                            }
                            i
                        }
                        _ => {
                            layout.tensor_page_elements.push(spec.page_elements(block_size));
                            layout.tensor_page_elements.len() - 1
                        }
                    };
                }
                layout.groups.push(KvCacheGroup { spec: *spec, layers: chunk.to_vec() });
            }
        }
        layout
    }

    /// Elements one block id takes across every paged tensor.
    pub fn block_elements(&self) -> usize {
        self.tensor_page_elements.iter().sum()
    }

    /// Elements of one request's recurrent state across every recurrent layer.
    pub fn state_elements_per_request(&self) -> usize {
        self.state_tensor_elements.iter().sum()
    }

    /// Blocks one request of `max_model_len` tokens can hold at once, over all groups.
    pub fn max_blocks_per_request(&self, block_size: usize, max_model_len: usize, max_step_tokens: usize) -> usize {
        self.groups.iter().map(|g| g.spec.max_blocks_per_request(block_size, max_model_len, max_step_tokens)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: KvCacheSpec = KvCacheSpec::FullAttention { num_kv_heads: 2, head_dim: 8 };
    const SLIDE: KvCacheSpec = KvCacheSpec::SlidingWindow { num_kv_heads: 2, head_dim: 8, window: 32 };

    #[test]
    fn one_spec_is_one_group_with_a_tensor_per_layer() {
        let l = KvCacheLayout::new(&[FULL; 3], 16);
        assert_eq!(l.groups.len(), 1);
        assert_eq!(l.layer_tensor, vec![0, 1, 2]);
        assert_eq!(l.block_elements(), 3 * 16 * 2 * 2 * 8);
    }

    #[test]
    fn gemma_like_layers_share_tensors_across_groups() {
        // Five sliding layers to one full, 12 layers: 10 sliding (five groups of 2), 2 full.
        let specs: Vec<KvCacheSpec> = (0..12).map(|i| if (i + 1) % 6 == 0 { FULL } else { SLIDE }).collect();
        let l = KvCacheLayout::new(&specs, 16);
        assert_eq!(l.groups.len(), 6);
        assert!(l.groups.iter().all(|g| g.layers.len() == 2));
        assert_eq!(l.tensor_page_elements.len(), 2, "two tensors shared by six groups");
        assert_eq!(l.block_elements(), 2 * 16 * 32);
        for g in &l.groups {
            let tensors: Vec<usize> = g.layers.iter().map(|&x| l.layer_tensor[x]).collect();
            assert_eq!(tensors, vec![0, 1]);
        }
    }

    #[test]
    fn unequal_pages_and_recurrent_state_are_sized_per_layer() {
        let mla = KvCacheSpec::Mla { kv_lora_rank: 64, qk_rope_head_dim: 16 };
        let rec = KvCacheSpec::Recurrent { state_elements: 1000 };
        let l = KvCacheLayout::new(&[mla, FULL, rec, FULL, KvCacheSpec::Recurrent { state_elements: 500 }], 16);
        assert_eq!(l.groups.len(), 4);
        assert_eq!(l.tensor_page_elements, vec![16 * 80, 16 * 32, 16 * 32]);
        assert_eq!(l.state_tensor_elements, vec![1000, 500]);
        assert_eq!(l.state_elements_per_request(), 1500);
        assert_eq!(l.layer_group, vec![0, 1, 2, 1, 3]);
        assert_eq!(l.max_blocks_per_request(16, 100, 64), 7 + 7);
    }

    #[test]
    fn a_window_needs_its_span_plus_one_step() {
        assert_eq!(SLIDE.max_blocks_per_request(16, 10_000, 64), (31 + 64usize).div_ceil(16) + 1);
        assert_eq!(SLIDE.max_blocks_per_request(16, 40, 64), 4);
    }
}
