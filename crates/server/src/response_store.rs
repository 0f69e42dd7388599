//! The in-memory store of `/v1/responses` results (`store: true`): what `GET` and `DELETE
//! /v1/responses/{id}` and a later request's `previous_response_id` read. vLLM keeps every stored
//! response forever (behind `VLLM_ENABLE_RESPONSES_API_STORE`); this store is on by default, as
//! OpenAI's is, and bounded: past its entry count or its byte budget the oldest responses go.
//! `VLLM_RS_MAX_STORED_RESPONSES` sets the count (0 turns storing off).

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Stored responses at most.
pub const MAX_RESPONSES: usize = 4096;
/// Bytes of stored JSON (responses and their input messages) at most.
pub const MAX_BYTES: usize = 64 << 20;

/// A stored response: the response object, and the conversation that led to it (chat messages,
/// without the request's `instructions`, which a follow-up does not inherit).
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub response: Value,
    pub messages: Vec<Value>,
}

impl Stored {
    fn size(&self) -> usize {
        let messages: usize = self.messages.iter().map(|m| m.to_string().len()).sum();
        self.response.to_string().len() + messages
    }
}

pub struct ResponseStore {
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, (Stored, usize)>,
    /// Ids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

/// The environment variable that sets how many responses are kept.
pub const MAX_RESPONSES_ENV: &str = "VLLM_RS_MAX_STORED_RESPONSES";

impl ResponseStore {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        ResponseStore { max_entries, max_bytes, inner: Mutex::new(Inner::default()) }
    }

    /// How many responses to keep: [`MAX_RESPONSES_ENV`] when set, else [`MAX_RESPONSES`]; a
    /// value that is not a count is an error naming the variable.
    pub fn max_from_env() -> Result<usize, String> {
        match std::env::var(MAX_RESPONSES_ENV) {
            Err(_) => Ok(MAX_RESPONSES),
            Ok(v) => v.trim().parse().map_err(|_| format!("{MAX_RESPONSES_ENV}={v:?} is not a count of responses")),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `item` under `id`, then drops the oldest entries until both bounds hold. One entry
    /// larger than the byte budget is not kept.
    pub fn insert(&self, id: &str, item: Stored) {
        let size = item.size();
        let mut inner = self.lock();
        Self::forget(&mut inner, id);
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        inner.by_id.insert(id.to_string(), (item, size));
        inner.order.push_back(id.to_string());
        inner.bytes += size;
        while inner.by_id.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else { break };
            if let Some((_, s)) = inner.by_id.remove(&oldest) {
                inner.bytes -= s;
            }
        }
    }

    /// Drops `id` from the map and the order (a scan: the store holds a few thousand ids).
    fn forget(inner: &mut Inner, id: &str) -> bool {
        let Some((_, size)) = inner.by_id.remove(id) else { return false };
        inner.bytes -= size;
        inner.order.retain(|x| x != id);
        true
    }

    pub fn get(&self, id: &str) -> Option<Stored> {
        self.lock().by_id.get(id).map(|(s, _)| s.clone())
    }

    /// Removes `id`; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        Self::forget(&mut self.lock(), id)
    }

    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(text: &str) -> Stored {
        Stored { response: json!({"text": text}), messages: vec![json!({"role": "user", "content": text})] }
    }

    #[test]
    fn the_oldest_go_past_the_entry_bound() {
        let s = ResponseStore::new(3, usize::MAX);
        for i in 0..5 {
            s.insert(&format!("r{i}"), item("x"));
        }
        assert_eq!(s.len(), 3);
        assert!(s.get("r0").is_none() && s.get("r1").is_none());
        assert_eq!(s.get("r4"), Some(item("x")));
    }

    #[test]
    fn the_oldest_go_past_the_byte_bound_and_deletes_free_room() {
        let one = item("0123456789").size();
        let s = ResponseStore::new(100, 3 * one);
        for i in 0..3 {
            s.insert(&format!("r{i}"), item("0123456789"));
        }
        assert_eq!(s.len(), 3);
        assert!(s.remove("r1"));
        assert!(!s.remove("r1"));
        s.insert("r3", item("0123456789"));
        assert_eq!(s.len(), 3, "the deleted entry's bytes were given back");
        assert!(s.get("r0").is_some());
        s.insert("r4", item("0123456789"));
        assert!(s.get("r0").is_none(), "the oldest went");
        let big = "y".repeat(4 * one);
        s.insert("huge", item(&big));
        assert!(s.get("huge").is_none(), "larger than the whole budget: not kept");
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn reinserting_an_id_replaces_it() {
        let s = ResponseStore::new(2, usize::MAX);
        s.insert("a", item("1"));
        s.insert("a", item("2"));
        s.insert("b", item("3"));
        assert_eq!(s.get("a"), Some(item("2")));
        assert_eq!(s.len(), 2);
    }
}
