//! Server-sent events from a streamed response body, as `vllm bench serve` reads them: events end
//! at a blank line; a trailing `data: ` event whose payload is already `[DONE]` or a whole JSON
//! value is taken without waiting for its blank line; comments (`:` lines, keep-alive pings) are
//! dropped. CRLF line ends are accepted too.

/// One event's payload.
#[derive(Clone, Debug, PartialEq)]
pub enum SseEvent {
    /// The `data:` lines' text (several joined by `\n`), and the `event:` name if one was given.
    Data { event: Option<String>, data: String },
    /// `data: [DONE]`.
    Done,
}

/// Splits a byte stream into events; feed it the body's chunks as they arrive.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a chunk; returns the events it completed. Invalid UTF-8 in an event is an error.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some((end, sep)) = find_blank_line(&self.buf) {
            let raw: Vec<u8> = self.buf.drain(..end + sep).take(end).collect();
            if let Some(ev) = parse_event(&raw)? {
                out.push(ev);
            }
        }
        // An event not (yet) followed by a blank line, but visibly complete.
        if self.buf.starts_with(b"data: ")
            && let Ok(text) = std::str::from_utf8(&self.buf)
        {
            let content = text["data: ".len()..].trim();
            if content == "[DONE]"
                || (!content.is_empty() && serde_json::from_str::<serde_json::Value>(content).is_ok())
            {
                let raw = std::mem::take(&mut self.buf);
                if let Some(ev) = parse_event(&raw)? {
                    out.push(ev);
                }
            }
        }
        Ok(out)
    }

    /// Bytes received but not yet part of an event.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

/// The first blank line: (index where the event ends, length of the separator).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' {
            if buf[i + 1] == b'\n' {
                return Some((i, 2));
            }
            if buf[i + 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, 3));
            }
        }
        i += 1;
    }
    None
}

fn parse_event(raw: &[u8]) -> Result<Option<SseEvent>, String> {
    let text = std::str::from_utf8(raw).map_err(|e| format!("invalid UTF-8 in the event stream: {e}"))?;
    let mut data: Option<String> = None;
    let mut event = None;
    for line in text.trim().lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            "event" => event = Some(value.to_string()),
            _ => {}
        }
    }
    Ok(match data {
        Some(d) if d.trim() == "[DONE]" => Some(SseEvent::Done),
        Some(d) => Some(SseEvent::Data { event, data: d }),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> SseEvent {
        SseEvent::Data { event: None, data: s.to_string() }
    }

    fn feed_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        chunks.iter().flat_map(|c| p.feed(c).unwrap()).collect()
    }

    #[test]
    fn whole_events_and_done() {
        let body = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
        assert_eq!(feed_all(&[body]), [data("{\"a\":1}"), data("{\"b\":2}"), SseEvent::Done]);
    }

    #[test]
    fn events_split_across_reads_at_every_byte() {
        let body =
            "data: {\"text\":\"héllo\"}\n\n: ping\n\ndata: {\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        let want = vec![data("{\"text\":\"héllo\"}"), data("{\"usage\":{\"completion_tokens\":3}}"), SseEvent::Done];
        let bytes = body.as_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(feed_all(&[&bytes[..cut], &bytes[cut..]]), want, "cut at {cut}");
        }
        // One byte at a time (splits the two-byte 'é' too).
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(feed_all(&singles), want);
    }

    #[test]
    fn complete_trailing_event_without_blank_line() {
        let mut p = SseParser::new();
        assert_eq!(p.feed(b"data: {\"a\":").unwrap(), []);
        assert_eq!(p.feed(b"1}").unwrap(), [data("{\"a\":1}")]);
        assert!(p.pending().is_empty());
        assert_eq!(p.feed(b"\n\ndata: [DONE]").unwrap(), [SseEvent::Done]);
    }

    #[test]
    fn comments_crlf_event_names_and_multiline_data() {
        let body = b": keep-alive\r\n\r\nevent: error\r\ndata: {\"error\":\r\ndata: 1}\r\n\r\ndata:[DONE]\r\n\r\n";
        assert_eq!(
            feed_all(&[body]),
            [SseEvent::Data { event: Some("error".into()), data: "{\"error\":\n1}".into() }, SseEvent::Done]
        );
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }
}
