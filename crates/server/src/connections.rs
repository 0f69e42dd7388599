//! Accepting and serving HTTP/1.1 connections, with the limits a server facing careless or
//! hostile clients needs (axum's `serve` has none of them):
//! - at most `max_connections` open at once; one more is answered 503 and closed;
//! - a request head must be complete within `keep_alive_timeout` of the connection opening or
//!   of the previous response (idle keep-alive connections and half-sent heads are closed);
//! - when shutdown begins the listener closes, connections with no request in progress close at
//!   once, and the others close after their response (the body-read timeout and the shutdown
//!   check in `json_body` end requests still waiting for their body).

use crate::config::ConnectionLimits;
use crate::errors::ApiError;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tower_service::Service;
use tracing::{debug, warn};

/// Serves `app` on `listener` until `shutdown` turns true, then stops accepting and returns once
/// every connection has closed.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = (limits.max_connections > 0).then(|| Arc::new(Semaphore::new(limits.max_connections)));
    // Every connection task holds a sender: when all are gone, every connection has closed.
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted.
                    warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.wait_for(|down| *down) => break,
        };
        let permit = match &slots {
            None => None,
            Some(s) => match s.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    tokio::spawn(refuse(stream, limits.max_connections));
                    continue;
                }
            },
        };
        let conn = Connection { app: app.clone(), peer, limits: limits.clone(), shutdown: shutdown.clone() };
        let alive = alive.clone();
        tokio::spawn(async move {
            conn.serve(stream).await;
            drop((permit, alive));
        });
    }
    drop(listener);
    drop(alive);
    let _ = all_closed.recv().await;
}

/// Over the cap: a 503 in the OpenAI error shape, then close (after reading what the client
/// sent, so that the close does not reset the connection before the answer is read).
async fn refuse(mut stream: TcpStream, cap: usize) {
    let body = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableError",
        format!("The server has {cap} connections open, as many as it accepts (--limit-concurrency); retry later."),
    )
    .to_json();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut read = 0;
        while read < 64 << 10 {
            match stream.read(&mut sink).await? {
                0 => break,
                k => read += k,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

struct Connection {
    app: Router,
    peer: SocketAddr,
    limits: ConnectionLimits,
    shutdown: watch::Receiver<bool>,
}

impl Connection {
    async fn serve(mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        // Requests of this connection whose response has not been sent in full.
        let in_progress = Arc::new(AtomicUsize::new(0));
        let service = {
            let (app, peer, in_progress) = (self.app.clone(), self.peer, in_progress.clone());
            hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let guard = InProgress::new(&in_progress);
                let mut app = app.clone();
                async move {
                    let resp = app.call(req).await?;
                    Ok::<_, Infallible>(resp.map(|body| TrackedBody { body, _guard: guard }))
                }
            })
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(self.limits.keep_alive_timeout);
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!("connection from {}: {e}", self.peer);
                }
                return;
            }
            _ = self.shutdown.wait_for(|down| *down) => {}
        }
        conn.as_mut().graceful_shutdown();
        if in_progress.load(Ordering::SeqCst) == 0 {
            return; // idle, or a request head not yet complete: close now
        }
        let _ = conn.await;
    }
}

/// Counts a request as in progress while it lives.
struct InProgress(Arc<AtomicUsize>);

impl InProgress {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        InProgress(count.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted as in progress until it has been sent (or
/// dropped).
struct TrackedBody {
    body: axum::body::Body,
    _guard: InProgress,
}

impl HttpBody for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
