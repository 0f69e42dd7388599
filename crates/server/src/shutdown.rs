//! Serving until a signal: listen, load the model in the background, drain on SIGINT/SIGTERM.

use crate::app::router;
use crate::connections::serve_connections;
use crate::state::{AppState, ModelContext};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};
use tracing::{error, info, warn};

/// How long to let the last chunks (abort finishes) flush once the engine has stopped.
const FLUSH_AFTER_ABORT: Duration = Duration::from_secs(1);

/// Serves on `listener` until SIGINT/SIGTERM (then drains) or until `load` fails (then returns
/// its error). `load` runs on a blocking thread; `/health` answers 503 until it returns.
pub async fn serve<F>(listener: TcpListener, state: Arc<AppState>, load: F) -> Result<(), String>
where
    F: FnOnce() -> Result<ModelContext, String> + Send + 'static,
{
    let (fail_tx, fail_rx) = oneshot::channel::<String>();
    let loading = state.clone();
    tokio::task::spawn_blocking(move || match load() {
        Ok(model) => {
            loading.set_ready(model);
            info!(
                "model ready; the server answers requests ({:.2} s after start)",
                loading.started.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            let _ = fail_tx.send(e);
        }
    });

    let draining = Arc::new(Notify::new());
    let load_error: Arc<std::sync::Mutex<Option<String>>> = Default::default();
    let graceful = {
        let state = state.clone();
        let draining = draining.clone();
        let load_error = load_error.clone();
        async move {
            tokio::select! {
                sig = first_signal() => info!("{sig}: no longer accepting connections; finishing in-flight requests"),
                Ok(e) = fail_rx => {
                    error!("loading the model failed: {e}");
                    *load_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            }
            state.begin_shutdown();
            draining.notify_one();
        }
    };
    tokio::spawn(graceful);
    let server =
        serve_connections(listener, router(state.clone()), state.config.connections.clone(), state.shutdown_signal());
    tokio::pin!(server);
    let grace = state.config.shutdown_grace;
    let drained = tokio::select! {
        () = &mut server => true,
        why = async {
            draining.notified().await;
            tokio::select! {
                _ = tokio::time::sleep(grace) => format!("grace period of {:.0} s is over", grace.as_secs_f64()),
                sig = first_signal() => format!("second signal ({sig})"),
            }
        } => {
            warn!("{why}: aborting the requests still running");
            false
        }
    };
    if let Some(model) = state.model() {
        let model = model.clone();
        let _ = tokio::task::spawn_blocking(move || model.runner.shutdown()).await;
    }
    if !drained {
        let _ = tokio::time::timeout(FLUSH_AFTER_ABORT, &mut server).await;
    }
    if let Some(e) = load_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(format!("loading the model failed: {e}"));
    }
    info!("shut down");
    Ok(())
}

/// The next SIGINT or SIGTERM.
async fn first_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            _ => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
