//! Blocking store work off the async runtime: redb opens, durable commits
//! (a checkpoint's flush), checkpoint files, restore batches and the drop
//! of a `Database` run on tokio's blocking pool (`spawn_blocking`), so a
//! store file's `fsync` or a large commit never holds a runtime thread
//! that other tasks (records of other partitions, the dispatcher, a
//! current-thread runtime's whole application) need. Issue #15 found
//! these calls inline on the runtime stalling group heartbeats under load.

/// Runs `f` on the blocking pool and waits for it. The error says that the
/// blocking task did not finish (it panicked, or the runtime is shutting
/// down).
pub(crate) async fn off_runtime<T, F>(what: &str, f: F) -> Result<T, String>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("{what}: the blocking task did not finish: {e}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The work blocks until a task of the same one-thread runtime runs:
    /// done inline it would hold that thread, the task could not run, and
    /// the wait would time out.
    #[tokio::test(flavor = "current_thread")]
    async fn blocking_work_leaves_the_runtime_thread_free() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let signal = tokio::spawn(async move {
            let _ = tx.send(());
        });
        let got = off_runtime("test", move || rx.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
        assert_eq!(got, Ok(()), "the runtime's task could not run meanwhile");
        signal.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_in_the_blocking_work_is_an_error_naming_it() {
        let e = off_runtime("closing state stores", || -> () { panic!("boom") })
            .await
            .unwrap_err();
        assert!(e.starts_with("closing state stores: "), "{e}");
    }
}
