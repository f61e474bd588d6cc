//! A sleep that ends at its deadline, within the OS timer's slack (tens of
//! µs), for the benchmarks' simulated calls.
//!
//! `tokio::time::sleep` runs on a millisecond wheel: it rounds a deadline
//! up to the next millisecond tick, and a parked runtime computes its park
//! timeout from the current tick rounded down, so an idle runtime wakes a
//! 10 ms sleep about 1 ms late on average (tokio 1.54, `time/source.rs`
//! and `time/mod.rs`), whatever the code around it does. A 10 ms network
//! call ends when its response arrives, with no such rounding. This timer
//! keeps the deadlines on one thread, which sleeps until the earliest
//! (`std::thread::park_timeout`, a nanosecond clock) and completes each
//! due sleep through a oneshot channel, waking its task.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

struct Due {
    at: Instant,
    seq: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

static QUEUE: Mutex<BinaryHeap<Reverse<Due>>> = Mutex::new(BinaryHeap::new());
static SEQ: AtomicU64 = AtomicU64::new(0);
static THREAD: OnceLock<Thread> = OnceLock::new();

fn queue() -> std::sync::MutexGuard<'static, BinaryHeap<Reverse<Due>>> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The timer thread: completes due sleeps, then parks until the next
/// deadline (or a new earliest one unparks it).
fn run() {
    let mut due = Vec::new();
    loop {
        let next = {
            let mut q = queue();
            let now = Instant::now();
            while q.peek().is_some_and(|Reverse(d)| d.at <= now) {
                if let Some(Reverse(d)) = q.pop() {
                    due.push(d.done);
                }
            }
            q.peek().map(|Reverse(d)| d.at)
        };
        // Woken outside the lock: a wake schedules a task on the runtime.
        for done in due.drain(..) {
            let _ = done.send(());
        }
        match next {
            Some(at) => std::thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => std::thread::park(),
        }
    }
}

fn thread() -> &'static Thread {
    THREAD.get_or_init(|| {
        std::thread::Builder::new()
            .name("precise-sleep".into())
            .spawn(run)
            .expect("spawning the timer thread")
            .thread()
            .clone()
    })
}

/// Sleeps `d`, ending within the OS timer's slack of the deadline.
pub async fn sleep(d: Duration) {
    let at = Instant::now() + d;
    let (done, wait) = oneshot::channel();
    let seq = SEQ.fetch_add(1, Relaxed);
    let earliest = {
        let mut q = queue();
        let earliest = q.peek().is_none_or(|Reverse(first)| at < first.at);
        q.push(Reverse(Due { at, seq, done }));
        earliest
    };
    if earliest {
        thread().unpark();
    }
    let _ = wait.await;
}
