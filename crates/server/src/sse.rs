//! Server-sent events as vLLM writes them: `data: <json>\n\n` per chunk, `data: [DONE]\n\n` at
//! the end, and (only when configured) `: keep-alive\n\n` comments on an idle stream.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

pub const DONE: &str = "data: [DONE]\n\n";
const KEEP_ALIVE: &str = ": keep-alive\n\n";

pub fn data(json: &str) -> String {
    format!("data: {json}\n\n")
}

/// A `text/event-stream` response from a stream of ready-made events.
pub fn response<S>(events: S, keep_alive: Option<Duration>) -> Response
where
    S: Stream<Item = String> + Send + 'static,
{
    let body = match keep_alive {
        Some(every) if !every.is_zero() => Body::from_stream(KeepAlive::new(events, every)),
        _ => Body::from_stream(futures_util::StreamExt::map(events, |e| Ok::<_, Infallible>(Bytes::from(e)))),
    };
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    r
}

/// Passes events through; yields a keep-alive comment whenever `every` passes without one.
struct KeepAlive<S> {
    inner: Pin<Box<S>>,
    every: Duration,
    timer: Pin<Box<Sleep>>,
    done: bool,
}

impl<S> KeepAlive<S> {
    fn new(inner: S, every: Duration) -> Self {
        KeepAlive { inner: Box::pin(inner), every, timer: Box::pin(tokio::time::sleep(every)), done: false }
    }
}

impl<S: Stream<Item = String>> Stream for KeepAlive<S> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let every = self.every;
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(e)) => {
                self.timer.as_mut().reset(Instant::now() + every);
                Poll::Ready(Some(Ok(Bytes::from(e))))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.timer.as_mut().reset(Instant::now() + every);
                    Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE.as_bytes()))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn keep_alive_comments_only_while_idle() {
        // One event, then 120 ms of silence, then another: with a 50 ms interval, comments fill
        // the gap and stop when events flow again.
        let events = futures_util::stream::unfold(0, |i| async move {
            match i {
                0 => Some(("data: a\n\n".to_string(), 1)),
                1 => {
                    tokio::time::sleep(Duration::from_millis(120)).await;
                    Some(("data: b\n\n".to_string(), 2))
                }
                _ => None,
            }
        });
        let out: Vec<String> = KeepAlive::new(events, Duration::from_millis(50))
            .map(|b| String::from_utf8(b.unwrap().to_vec()).unwrap())
            .collect()
            .await;
        assert_eq!(out.first().map(String::as_str), Some("data: a\n\n"));
        assert_eq!(out.last().map(String::as_str), Some("data: b\n\n"));
        let comments = out.iter().filter(|e| e.as_str() == KEEP_ALIVE).count();
        assert!((1..=2).contains(&comments), "{out:?}");
    }

    #[test]
    fn data_lines() {
        assert_eq!(data("{}"), "data: {}\n\n");
        assert_eq!(DONE, "data: [DONE]\n\n");
    }
}
