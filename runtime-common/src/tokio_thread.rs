//! A thread of its own running one future on a current-thread tokio runtime (timers and
//! I/O on): how the parts that need tokio (the NATS client, hyper) run beside relays and
//! agents on any executor.

use std::future::Future;

/// Runs the future `f` makes on a new thread named `name`; `failed` is called there
/// instead if the runtime cannot be built.
pub(crate) fn spawn<F, Fut>(
    name: &str,
    failed: impl FnOnce(String) + Send + 'static,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(f()),
                Err(e) => failed(e.to_string()),
            }
        })
}
