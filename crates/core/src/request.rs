//! A request as the scheduler sees it: token ids, progress, status and stop conditions.

use crate::block_hash::{BlockHash, hash_block_tokens};

/// Lifecycle of a request (vLLM's `RequestStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    Waiting,
    Running,
    /// Blocks were taken back; it waits at the front of the queue to be recomputed.
    Preempted,
    Finished(FinishReason),
}

/// Why a request ended (the OpenAI `finish_reason`, plus `abort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS or a stop token (or, decided by the frontend, a stop string).
    Stop,
    /// `max_tokens` or `max_model_len` reached.
    Length,
    /// Cancelled by the client or the server.
    Abort,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// The stop conditions the scheduler checks after every sampled token.
#[derive(Clone, Debug, Default)]
pub struct StopParams {
    /// Maximum number of output tokens.
    pub max_tokens: usize,
    /// The tokenizer's EOS; `None` when `ignore_eos` is set.
    pub eos_token_id: Option<u32>,
    /// Other tokens that end the request (user `stop_token_ids` and generation_config EOS ids,
    /// the latter dropped when `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
}

pub struct Request {
    pub request_id: String,
    pub prompt_len: usize,
    /// Prompt followed by output tokens.
    all_token_ids: Vec<u32>,
    pub num_computed_tokens: usize,
    pub status: RequestStatus,
    /// The stop token that ended the request, if any.
    pub stop_token: Option<u32>,
    pub params: StopParams,
    /// Lower runs first under the priority policy (as vLLM).
    pub priority: i32,
    /// Arrival order (ties in priority go to the earlier request).
    pub arrival: u64,
    /// Chained hashes of every full block of `all_token_ids`.
    pub block_hashes: Vec<BlockHash>,
    /// Mixed into the first block's hash so tenants do not share cache entries.
    pub cache_salt: Option<String>,
    /// Requests that need every prompt position's logits must compute them all.
    pub skip_reading_prefix_cache: bool,
    /// Most tokens of this request one step may run (prompt logprobs: every prompt row needs
    /// its logits, so long prompts run in bounded chunks); `None`: no cap beyond the budget.
    pub max_tokens_per_step: Option<usize>,
    /// Prompt tokens served from the prefix cache at first scheduling (for usage reporting).
    pub num_cached_tokens: Option<usize>,
    pub num_preemptions: usize,
    /// Draft tokens proposed for the next step (speculative decoding): scheduled after the
    /// known tokens and verified by the model; not part of `all_token_ids`.
    pub spec_token_ids: Vec<u32>,
}

impl Request {
    pub fn new(request_id: impl Into<String>, prompt_token_ids: Vec<u32>, params: StopParams, arrival: u64) -> Self {
        Request {
            request_id: request_id.into(),
            prompt_len: prompt_token_ids.len(),
            all_token_ids: prompt_token_ids,
            num_computed_tokens: 0,
            status: RequestStatus::Waiting,
            stop_token: None,
            params,
            priority: 0,
            arrival,
            block_hashes: Vec::new(),
            cache_salt: None,
            skip_reading_prefix_cache: false,
            max_tokens_per_step: None,
            num_cached_tokens: None,
            num_preemptions: 0,
            spec_token_ids: Vec::new(),
        }
    }

    pub fn num_tokens(&self) -> usize {
        self.all_token_ids.len()
    }

    pub fn num_output_tokens(&self) -> usize {
        self.all_token_ids.len() - self.prompt_len
    }

    pub fn all_token_ids(&self) -> &[u32] {
        &self.all_token_ids
    }

    pub fn prompt_token_ids(&self) -> &[u32] {
        &self.all_token_ids[..self.prompt_len]
    }

    pub fn output_token_ids(&self) -> &[u32] {
        &self.all_token_ids[self.prompt_len..]
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.status, RequestStatus::Finished(_))
    }

    /// Appends a sampled token (block hashes follow as blocks fill up).
    pub fn append_output_token(&mut self, id: u32, block_size: usize) {
        self.all_token_ids.push(id);
        self.update_block_hashes(block_size);
    }

    /// Hashes every newly completed block.
    pub fn update_block_hashes(&mut self, block_size: usize) {
        let full = self.all_token_ids.len() / block_size;
        while self.block_hashes.len() < full {
            let i = self.block_hashes.len();
            let parent = i.checked_sub(1).map(|p| self.block_hashes[p]);
            let salt = if i == 0 { self.cache_salt.as_deref() } else { None };
            let tokens = &self.all_token_ids[i * block_size..(i + 1) * block_size];
            self.block_hashes.push(hash_block_tokens(parent, tokens, salt));
        }
    }

    /// vLLM's `check_stop`, run after each appended token: EOS, stop tokens, then length.
    pub fn check_stop(&mut self, max_model_len: usize) -> Option<FinishReason> {
        let last = *self.all_token_ids.last()?;
        if self.num_output_tokens() > 0 {
            if Some(last) == self.params.eos_token_id {
                return Some(FinishReason::Stop);
            }
            if self.params.stop_token_ids.contains(&last) {
                self.stop_token = Some(last);
                return Some(FinishReason::Stop);
            }
        }
        if self.num_tokens() >= max_model_len || self.num_output_tokens() >= self.params.max_tokens {
            return Some(FinishReason::Length);
        }
        None
    }
}
