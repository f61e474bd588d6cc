//! The soak run (issues #9 and #17; not part of CI): a producer, a streams
//! application and a group consumer run together in one process against a
//! real broker for a fixed time, and the process samples its own live heap
//! (counted by a wrapper around the system allocator), resident memory and
//! open file descriptors.
//!
//! ```sh
//! scripts/soak                       # 30 minutes on the local broker
//! scripts/soak --faults              # 30 minutes on the 3-node cluster, with faults
//! cargo run --release --example soak -- --minutes 2 --bootstrap 127.0.0.1:19092
//! ```
//!
//! Pipeline: the producer writes keyed records at `--rate` records/s to a
//! 3-partition input topic; the streams app (Key ordering, 256 in flight, a
//! 1 ms async call per record) copies them to an output topic; a group
//! consumer reads the output and commits every second. Each sample prints
//! records produced, streamed and consumed, RSS, live heap and fds.
//!
//! Faults (both off by default): `--rebalance-every-min M` starts a second
//! instance of the streams app every M minutes and stops it M minutes later
//! (each start and stop is a rebalance of the app's group);
//! `--leader-kill-every-min M` SIGKILLs the leader of an input partition
//! every M minutes through `--kafka-script` (`scripts/kafka kill|start`,
//! the 3-node cluster) and restarts it `--restart-after-secs` later.
//!
//! Heap sites (off by default): `--heap-sample-kib K` samples about one
//! allocation in every K KiB allocated and keeps its backtrace while it
//! lives; every `--heap-sites-every-secs` (60) and at the end of the run,
//! before the clients close, the live sampled heap is printed by call path
//! (module `sites`). The sampler's own memory is not in the live heap.
//!
//! The pass rule is printed before the run starts and judged at the end
//! (exit 1 when it fails):
//! - every acknowledged record reaches the consumer, and every record sent
//!   is acknowledged;
//! - every planned fault fired;
//! - after the warm-up, fds (see [`judge_fds`]): no socket is in CLOSE_WAIT
//!   (closed by the broker, still open here) in two successive samples; no
//!   broker has more sockets from this process than the open clients' pools
//!   can hold ([`CONNECTIONS_PER_BROKER`] per client); every tokio
//!   runtime's descriptors (its epoll instances and eventfd waker)
//!   belong to a live runtime: at most [`RUNTIME_FDS`] per runtime, the
//!   application's plus one per group-membership thread (each group member
//!   runs its membership on a one-thread runtime of its own), and no more
//!   membership threads than group members open since the sample before;
//!   the fds other than those and the sockets to the brokers (files,
//!   pipes, sockets closing) keep their floor: the lowest count of the
//!   last quarter of the post-warm-up samples is at most
//!   [`OTHER_FDS_FLOOR_RISE`] above the first quarter's (as for the heap:
//!   a leaked fd raises the floor for good, a socket closing shows for one
//!   sample). The total fd
//!   count is not judged: it follows the clients open and the nodes up (a
//!   second instance adds its connections, a killed node takes its own);
//!   a leaked connection shows as a socket stuck in CLOSE_WAIT (its broker
//!   went away) or as more sockets to a broker than the pools hold;
//! - the live heap grows by at most `--leak-bytes-per-hour` (default
//!   1 MiB/h) after `--warmup-min` (default 5): the growth is the rise of
//!   the floor (lowest sample) from the first quarter of the post-warm-up
//!   samples to the last quarter, per hour between the two quarters'
//!   midpoints. The floor, not the mean, because records in flight and
//!   fetch buffers come and go by megabytes while a leak raises the floor.
//!   At least 8 post-warm-up samples are needed to judge.

#[path = "common/topics.rs"]
mod topics;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig};
use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{OrderingMode, Streams, StreamsConfig, StringDeserializer};
use purekafka::Cluster;

/// How far the floor of the fds other than sockets to the brokers and the
/// runtimes' own may rise from the first quarter of the post-warm-up
/// samples to the last: one, because a second streams instance holds one
/// more (11 with one instance, 12 with two, as measured) and a quarter's
/// samples may all fall while two run; a leak of one fd per rebalance
/// (every 2 minutes) would raise it by several.
const OTHER_FDS_FLOOR_RISE: usize = 1;
/// Fds one tokio runtime holds, as measured (tokio 1.x on Linux): two
/// epoll instances and one eventfd (its I/O driver's poller and waker).
const RUNTIME_FDS: usize = 3;
/// Runtimes besides the membership threads': the application's.
const BASE_RUNTIMES: usize = 1;
/// Group members a streams instance opens: its consumer's.
const MEMBERS_PER_INSTANCE: usize = 1;
/// The name (as `/proc` shows it, cut to 15 bytes) of the thread a group
/// member's membership runs on.
const MEMBER_THREAD: &str = "purekafka-group";
/// Sockets one client keeps to one broker at most: its connection pool
/// holds one per (broker address, workload), for four workloads (produce,
/// fetch, group, admin: `purekafka::net::Workload`); bootstrap addresses
/// share them.
const CONNECTIONS_PER_BROKER: usize = 4;
/// Clients of the soak other than the streams instances, each with its own
/// pool: the topic/fault `Cluster`, the producer, the reading consumer. A
/// streams instance is one more (its consumer and producer share one).
const FIXED_CLIENTS: usize = 3;
/// Post-warm-up samples needed to judge the heap.
const MIN_JUDGED_SAMPLES: usize = 8;

struct Options {
    bootstrap: String,
    minutes: f64,
    sample: Duration,
    rate: u64,
    warmup_min: f64,
    leak_bytes_per_hour: f64,
    rebalance_every_min: f64,
    leader_kill_every_min: f64,
    kafka_script: String,
    restart_after: Duration,
    heap_sample_kib: usize,
    sites_every: Duration,
}

fn options() -> Options {
    let mut o = Options {
        bootstrap: "127.0.0.1:19092".into(),
        minutes: 30.0,
        sample: Duration::from_secs(30),
        rate: 5_000,
        warmup_min: 5.0,
        leak_bytes_per_hour: f64::from(1u32 << 20),
        rebalance_every_min: 0.0,
        leader_kill_every_min: 0.0,
        kafka_script: "scripts/kafka".into(),
        restart_after: Duration::from_secs(10),
        heap_sample_kib: 0,
        sites_every: Duration::from_secs(60),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < args.len() {
        let v = &args[i + 1];
        let bad = |what: &str| -> ! {
            eprintln!("soak: {what} wants a number, got {v:?}");
            std::process::exit(2)
        };
        match args[i].as_str() {
            "--bootstrap" => o.bootstrap = v.clone(),
            "--minutes" => o.minutes = v.parse().unwrap_or_else(|_| bad("--minutes")),
            "--sample-secs" => {
                o.sample = Duration::from_secs(v.parse().unwrap_or_else(|_| bad("--sample-secs")))
            }
            "--rate" => o.rate = v.parse().unwrap_or_else(|_| bad("--rate")),
            "--warmup-min" => o.warmup_min = v.parse().unwrap_or_else(|_| bad("--warmup-min")),
            "--leak-bytes-per-hour" => {
                o.leak_bytes_per_hour = v.parse().unwrap_or_else(|_| bad("--leak-bytes-per-hour"))
            }
            "--rebalance-every-min" => {
                o.rebalance_every_min = v.parse().unwrap_or_else(|_| bad("--rebalance-every-min"))
            }
            "--leader-kill-every-min" => {
                o.leader_kill_every_min =
                    v.parse().unwrap_or_else(|_| bad("--leader-kill-every-min"))
            }
            "--kafka-script" => o.kafka_script = v.clone(),
            "--restart-after-secs" => {
                o.restart_after =
                    Duration::from_secs(v.parse().unwrap_or_else(|_| bad("--restart-after-secs")))
            }
            "--heap-sample-kib" => {
                o.heap_sample_kib = v.parse().unwrap_or_else(|_| bad("--heap-sample-kib"))
            }
            "--heap-sites-every-secs" => {
                o.sites_every = Duration::from_secs(
                    v.parse().unwrap_or_else(|_| bad("--heap-sites-every-secs")),
                )
            }
            other => {
                eprintln!("soak: unknown option {other}");
                std::process::exit(2)
            }
        }
        i += 2;
    }
    o
}

/// The ids the consumer saw: one bit each (9 M ids, 30 min at 5,000/s, take
/// 1.1 MiB), so the checker itself barely moves the RSS it judges.
#[derive(Default)]
struct Seen {
    bits: Vec<u64>,
    count: usize,
}

impl Seen {
    fn insert(&mut self, id: u64) {
        let (word, bit) = ((id / 64) as usize, id % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1 + (word >> 3), 0);
        }
        if self.bits[word] & (1 << bit) == 0 {
            self.bits[word] |= 1 << bit;
            self.count += 1;
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.bits
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

/// The system allocator, counting live heap bytes, so a sample tells a leak
/// (live bytes climb) from memory the allocator keeps after it was freed
/// (RSS climbs, live bytes do not). With `--heap-sample-kib` it also keeps
/// a backtrace of sampled allocations ([`sites`]).
struct Counting;

static LIVE_HEAP: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call goes to `System` unchanged; only a counter and the
// sampled sites are added, and the sites' own allocations (made with the
// thread's `sites::BUSY` flag set) are neither counted nor sampled.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && !sites::busy() {
            LIVE_HEAP.fetch_add(layout.size() as u64, AtomicOrdering::Relaxed);
            sites::allocated(p, layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if !sites::busy() {
            LIVE_HEAP.fetch_sub(layout.size() as u64, AtomicOrdering::Relaxed);
            sites::freed(ptr);
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && !sites::busy() {
            LIVE_HEAP.fetch_add(new_size as u64, AtomicOrdering::Relaxed);
            LIVE_HEAP.fetch_sub(layout.size() as u64, AtomicOrdering::Relaxed);
            sites::freed(ptr);
            sites::allocated(p, new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap by allocation site, sampled (issue #17: where does the heap
/// grow across a leader kill?). One allocation in about every
/// `--heap-sample-kib` KiB allocated on a thread is sampled: its backtrace
/// is kept, unresolved, until it is freed, and stands for that many bytes
/// (or its own size when larger). A report resolves the backtraces still
/// live and sums them by call path. Everything here runs with the thread's
/// `BUSY` flag set, so its own allocations are not counted in the live
/// heap the pass rule judges, and cannot recurse into it.
mod sites {
    use std::backtrace::Backtrace;
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Sampling interval in bytes; 0 = off.
    static INTERVAL: AtomicUsize = AtomicUsize::new(0);
    /// Live sampled allocations: address -> (bytes it stands for, backtrace).
    static LIVE: Mutex<Option<HashMap<usize, (usize, Backtrace)>>> = Mutex::new(None);

    thread_local! {
        static BUSY: Cell<bool> = const { Cell::new(false) };
        static UNTIL_SAMPLE: Cell<isize> = const { Cell::new(0) };
    }

    pub fn busy() -> bool {
        BUSY.try_with(Cell::get).unwrap_or(false)
    }

    /// Runs `f` with this thread's allocations left out of counting and
    /// sampling.
    fn quietly<T>(f: impl FnOnce() -> T) -> T {
        BUSY.with(|b| b.set(true));
        let out = f();
        BUSY.with(|b| b.set(false));
        out
    }

    pub fn start(interval: usize) {
        quietly(|| *LIVE.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new()));
        INTERVAL.store(interval, Ordering::Relaxed);
    }

    pub fn allocated(p: *mut u8, size: usize) {
        let interval = INTERVAL.load(Ordering::Relaxed);
        if interval == 0 {
            return;
        }
        let due = UNTIL_SAMPLE
            .try_with(|left| {
                let now = left.get() - size as isize;
                if now > 0 {
                    left.set(now);
                    return false;
                }
                // A little jitter, so allocations in a fixed cycle are not
                // always the ones sampled.
                let jitter = (p as usize >> 4) % (interval / 4 + 1);
                left.set((interval - interval / 8 + jitter) as isize);
                true
            })
            .unwrap_or(false);
        if due {
            quietly(|| {
                let trace = Backtrace::force_capture();
                if let Some(live) = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    live.insert(p as usize, (size.max(interval), trace));
                }
            });
        }
    }

    pub fn freed(p: *mut u8) {
        if INTERVAL.load(Ordering::Relaxed) == 0 {
            return;
        }
        quietly(|| {
            let gone = LIVE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .and_then(|live| live.remove(&(p as usize)));
            drop(gone);
        });
    }

    /// Frames that say nothing about who holds the memory: the sampler,
    /// the allocator and the standard collections' growth. With line tables
    /// only, inlined frames carry bare names (`alloc`, `grow_one`), so the
    /// names are matched by fragment, and only in the run of frames that
    /// leads the backtrace.
    fn is_plumbing(name: &str) -> bool {
        const FRAGMENTS: [&str; 22] = [
            "backtrace",
            "sites::",
            "quietly",
            "allocated",
            "{closure#",
            "Counting",
            "__rust",
            "__rdl",
            "alloc",
            "grow",
            "reserve",
            "raw_vec",
            "RawVec",
            "with_capacity",
            "finish_grow",
            "shrink",
            "into_boxed_slice",
            "to_vec",
            "clone_from",
            "std::sys",
            "core::ops::function",
            "box_new",
        ];
        FRAGMENTS.iter().any(|f| name.contains(f))
    }

    /// `name (file:line)` frames of a resolved backtrace, from its `Display`
    /// (`N: name` lines, each followed by an `at file:line:col` line).
    fn frames(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for line in text.lines() {
            let line = line.trim_start();
            if let Some(at) = line.strip_prefix("at ") {
                // Keep the path from the crate's `src/` (or the last two
                // components), and the line.
                let short = at.rsplit_once("/src/").map(|(_, tail)| tail).unwrap_or(at);
                let short = short.rsplit_once(':').map_or(short, |(l, _col)| l);
                if let Some(last) = out.last_mut() {
                    if !last.ends_with(')') {
                        last.push_str(&format!(" ({short})"));
                    }
                }
                continue;
            }
            let Some((n, name)) = line.split_once(": ") else {
                continue;
            };
            if n.parse::<u32>().is_ok() {
                out.push(name.to_owned());
            }
        }
        out
    }

    /// The live sampled heap by call path (the first `depth` frames that
    /// are not plumbing), largest first, the top `top` of them; printed
    /// with `label`. Other threads' frees wait while it resolves.
    pub fn report(label: &str, depth: usize, top: usize) {
        if INTERVAL.load(Ordering::Relaxed) == 0 {
            return;
        }
        quietly(|| {
            let mut by_path: HashMap<String, (usize, usize)> = HashMap::new();
            let mut total = 0usize;
            {
                let guard = LIVE.lock().unwrap_or_else(|e| e.into_inner());
                for (bytes, trace) in guard.as_ref().into_iter().flat_map(|l| l.values()) {
                    let all = frames(&trace.to_string());
                    let path: Vec<&str> = all
                        .iter()
                        .map(String::as_str)
                        .skip_while(|name| is_plumbing(name))
                        .take(depth)
                        .collect();
                    let e = by_path.entry(path.join("\n      <- ")).or_default();
                    e.0 += bytes;
                    e.1 += 1;
                    total += bytes;
                }
            }
            let mut rows: Vec<_> = by_path.into_iter().collect();
            rows.sort_by_key(|row| std::cmp::Reverse(row.1 .0));
            let mut out = String::new();
            let _ = writeln!(
                out,
                "soak: heap sites at {label}: {:.2} MiB sampled live in {} paths (top {top})",
                total as f64 / (1 << 20) as f64,
                rows.len()
            );
            for (path, (bytes, n)) in rows.into_iter().take(top) {
                let _ = writeln!(
                    out,
                    "  {:>8.2} MiB {:>5} samples  {path}",
                    bytes as f64 / (1 << 20) as f64,
                    n
                );
            }
            print!("{out}");
        });
    }
}

/// Resident set size in KiB of this process.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// This process's open fds by what they are: TCP sockets per peer port,
/// with the inodes of those the peer has closed and we have not
/// (CLOSE_WAIT), the runtimes' epoll instances and eventfds, and everything
/// else (files, pipes, non-TCP sockets); and the group-membership threads
/// alive. Read from `/proc/self/fd`, `/proc/self/net/tcp{,6}` and
/// `/proc/self/task/*/comm`.
#[derive(Clone, Default)]
struct Fds {
    /// Peer port -> (sockets, inodes in CLOSE_WAIT).
    by_port: std::collections::BTreeMap<u16, (usize, Vec<u64>)>,
    /// Epoll instances and eventfds (the runtimes' I/O drivers).
    runtime: usize,
    /// Fds that are none of the above.
    other: usize,
    /// Threads named [`MEMBER_THREAD`].
    member_threads: usize,
}

impl Fds {
    fn read() -> Fds {
        use std::collections::HashMap;
        let mut sockets = Vec::new();
        let mut fds = Fds::default();
        for entry in std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
        {
            let link = std::fs::read_link(entry.path()).unwrap_or_default();
            let link = link.to_str().unwrap_or_default();
            let inode = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|i| i.parse::<u64>().ok());
            match inode {
                Some(i) => sockets.push(i),
                None if link == "anon_inode:[eventpoll]" || link == "anon_inode:[eventfd]" => {
                    fds.runtime += 1
                }
                None => fds.other += 1,
            }
        }
        fds.member_threads = std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == MEMBER_THREAD)
            })
            .count();
        // inode -> (peer port, CLOSE_WAIT?)
        let mut peer_of: HashMap<u64, (u16, bool)> = HashMap::new();
        for file in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9))
                else {
                    continue;
                };
                let port = remote
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                if let (Some(port), Ok(inode)) = (port, inode.parse()) {
                    peer_of.insert(inode, (port, *state == "08"));
                }
            }
        }
        for s in sockets {
            match peer_of.get(&s) {
                Some(&(port, close_wait)) => {
                    let e = fds.by_port.entry(port).or_default();
                    e.0 += 1;
                    if close_wait {
                        e.1.push(s);
                    }
                }
                None => fds.other += 1,
            }
        }
        fds
    }

    /// Sockets to `port` (0 when none).
    fn to_port(&self, port: u16) -> usize {
        self.by_port.get(&port).map_or(0, |e| e.0)
    }

    /// Everything but the sockets to `brokers` and the runtimes' fds.
    fn not_to(&self, brokers: &[u16]) -> usize {
        self.other
            + self
                .by_port
                .iter()
                .filter(|(p, _)| !brokers.contains(p))
                .map(|(_, e)| e.0)
                .sum::<usize>()
    }

    /// The sockets in CLOSE_WAIT.
    fn close_wait(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_port.values().flat_map(|e| e.1.iter().copied())
    }
}

impl std::fmt::Display for Fds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (port, (n, cw)) in &self.by_port {
            if cw.is_empty() {
                write!(f, ":{port}={n} ")?;
            } else {
                write!(f, ":{port}={n}(close_wait {}) ", cw.len())?;
            }
        }
        write!(
            f,
            "runtime={} other={} member_threads={}",
            self.runtime, self.other, self.member_threads
        )
    }
}

/// One sample: seconds since the start, live heap bytes, RSS KiB, fds,
/// and the clients (each with its own connection pool) open since the
/// sample before.
#[derive(Clone)]
struct Sample {
    at: f64,
    heap: u64,
    rss: u64,
    fds: Fds,
    clients: usize,
}

/// The live-heap verdict of the pass rule (see the module docs).
struct HeapVerdict {
    /// Samples after the warm-up.
    judged: usize,
    /// Floor of the first and of the last quarter, bytes.
    floors: (u64, u64),
    /// Floor growth, bytes per hour.
    growth_per_hour: f64,
}

/// The first and the last quarter of some samples.
type Quarters<'a> = (Vec<&'a Sample>, Vec<&'a Sample>);

/// The first and the last quarter of the samples after the warm-up, and
/// how many samples that is; `None` with too few to judge.
fn quarters(samples: &[Sample], warmup_secs: f64) -> (usize, Option<Quarters<'_>>) {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= warmup_secs).collect();
    let quarter = after.len() / 4;
    if after.len() < MIN_JUDGED_SAMPLES || quarter == 0 {
        return (after.len(), None);
    }
    let first = after[..quarter].to_vec();
    let last = after[after.len() - quarter..].to_vec();
    (after.len(), Some((first, last)))
}

fn judge_heap(samples: &[Sample], warmup_secs: f64) -> HeapVerdict {
    let (judged, split) = quarters(samples, warmup_secs);
    let Some((first, last)) = split else {
        return HeapVerdict {
            judged,
            floors: (0, 0),
            growth_per_hour: f64::INFINITY,
        };
    };
    let (first, last) = (&first[..], &last[..]);
    let floor = |q: &[&Sample]| q.iter().map(|s| s.heap).min().unwrap_or(0);
    let mid = |q: &[&Sample]| q.iter().map(|s| s.at).sum::<f64>() / q.len() as f64;
    let hours = (mid(last) - mid(first)) / 3600.0;
    let (f1, f4) = (floor(first), floor(last));
    HeapVerdict {
        judged,
        floors: (f1, f4),
        growth_per_hour: (f4 as f64 - f1 as f64) / hours,
    }
}

/// The fd verdict of the pass rule (see the module docs).
struct FdVerdict {
    /// Sockets seen in CLOSE_WAIT in two successive samples.
    stuck: usize,
    /// Samples with more sockets to one broker than the clients' pools
    /// can hold, as "at s: :port n > bound".
    over: Vec<String>,
    /// Fewest and most fds other than the sockets to the brokers and the
    /// runtimes' fds.
    other: (usize, usize),
    /// The floor (fewest) of those in the first and in the last quarter
    /// of the post-warm-up samples; `None` with too few samples.
    other_floors: Option<(usize, usize)>,
    /// Samples with more runtime fds than the live runtimes hold, or more
    /// membership threads than group members open, as "at s: ...".
    runtimes_over: Vec<String>,
    /// Most runtime fds and most membership threads in one sample.
    runtime_peak: (usize, usize),
    /// Most sockets to one broker, and that sample's bound.
    peak: (usize, usize),
}

impl FdVerdict {
    fn ok(&self) -> bool {
        self.stuck == 0
            && self.over.is_empty()
            && self.runtimes_over.is_empty()
            && self
                .other_floors
                .is_some_and(|(first, last)| last <= first + OTHER_FDS_FLOOR_RISE)
    }
}

fn judge_fds(samples: &[Sample], warmup_secs: f64, brokers: &[u16]) -> FdVerdict {
    let mut v = FdVerdict {
        stuck: 0,
        over: Vec::new(),
        other: (usize::MAX, 0),
        other_floors: None,
        runtimes_over: Vec::new(),
        runtime_peak: (0, 0),
        peak: (0, 0),
    };
    let mut before: Option<&Sample> = None;
    for s in samples.iter().filter(|s| s.at >= warmup_secs) {
        if let Some(b) = before {
            let was: Vec<u64> = b.fds.close_wait().collect();
            v.stuck += s.fds.close_wait().filter(|i| was.contains(i)).count();
        }
        let bound = s.clients * CONNECTIONS_PER_BROKER;
        for &port in brokers {
            let n = s.fds.to_port(port);
            if n > bound {
                v.over
                    .push(format!("at {:.0} s: :{port} {n} > {bound}", s.at));
            }
            if n > v.peak.0 {
                v.peak = (n, bound);
            }
        }
        let other = s.fds.not_to(brokers);
        v.other = (v.other.0.min(other), v.other.1.max(other));
        // The reading consumer and each streams instance's members.
        let members = 1 + s.clients.saturating_sub(FIXED_CLIENTS) * MEMBERS_PER_INSTANCE;
        let threads = s.fds.member_threads;
        let runtime_bound = RUNTIME_FDS * (BASE_RUNTIMES + threads);
        if threads > members || s.fds.runtime > runtime_bound {
            v.runtimes_over.push(format!(
                "at {:.0} s: {} runtime fds (bound {runtime_bound}), {threads} membership \
                 threads (bound {members})",
                s.at, s.fds.runtime
            ));
        }
        v.runtime_peak = (
            v.runtime_peak.0.max(s.fds.runtime),
            v.runtime_peak.1.max(threads),
        );
        before = Some(s);
    }
    if v.other.0 > v.other.1 {
        v.other = (0, 0);
    }
    if let (_, Some((first, last))) = quarters(samples, warmup_secs) {
        let floor = |q: &[&Sample]| q.iter().map(|s| s.fds.not_to(brokers)).min().unwrap_or(0);
        v.other_floors = Some((floor(&first), floor(&last)));
    }
    v
}

/// The streams app: a copy from `input` to `output` with a 1 ms async call
/// per record. A second instance with the same `app` joins the same group.
async fn start_streams(
    app: &str,
    bootstrap: &str,
    input: &str,
    output: &str,
) -> purekafka::Result<purekafka::streams::RunningStreams> {
    let config = StreamsConfig::builder(app, bootstrap)
        .ordering(OrderingMode::Key)
        .max_in_flight(256, 256)
        .build()?;
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .map_async(|rec| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(rec)
        })
        .to(output, StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("soak streams", e.to_string()))
}

/// How long a restarted node may take to serve (`scripts/kafka`'s
/// `PUREKAFKA_KAFKA_TIMEOUT`, unless set): its default of 90 s was once
/// too short for a node restarting on a loaded machine (its controller
/// reported 6.7 s event handling), which failed a run's last restart.
const RESTART_TIMEOUT_SECS: &str = "300";

/// Runs `<script> <verb> <node>` (`scripts/kafka kill|start`); `Err` says
/// what failed.
async fn node_command(script: &str, verb: &str, node: i32) -> Result<(), String> {
    let timeout = std::env::var("PUREKAFKA_KAFKA_TIMEOUT")
        .unwrap_or_else(|_| RESTART_TIMEOUT_SECS.to_owned());
    let status = tokio::process::Command::new(script)
        .args([verb, &node.to_string()])
        .env("PUREKAFKA_KAFKA_TIMEOUT", timeout)
        .status()
        .await
        .map_err(|e| format!("{script} {verb} {node}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{script} {verb} {node}: {status}"))
    }
}

/// Every `every` until `end`, SIGKILLs the leader of one of `topic`'s
/// partitions (in turn) and restarts it `restart_after` later. Returns the
/// faults done (node ids) or the first failure.
async fn kill_leaders(
    cluster: Cluster,
    topic: String,
    script: String,
    every: Duration,
    restart_after: Duration,
    end: tokio::time::Instant,
) -> Result<Vec<i32>, String> {
    let mut killed = Vec::new();
    let mut next = tokio::time::Instant::now() + every;
    let mut partition = 0usize;
    while next < end {
        tokio::time::sleep_until(next).await;
        next += every;
        let topics = [topic.clone()];
        let meta = cluster
            .refresh_metadata(Some(&topics))
            .await
            .map_err(|e| format!("metadata before a leader kill: {e}"))?;
        let leader = meta
            .topics
            .get(&topic)
            .and_then(|t| t.partitions.get(partition % t.partitions.len().max(1)))
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
            .ok_or_else(|| format!("{topic}-{partition}: no leader to kill"))?;
        partition += 1;
        node_command(&script, "kill", leader).await?;
        println!("soak: fault: SIGKILL of node {leader} (leader of {topic})");
        tokio::time::sleep(restart_after).await;
        node_command(&script, "start", leader).await?;
        println!("soak: fault: node {leader} restarted");
        killed.push(leader);
    }
    Ok(killed)
}

#[tokio::main]
async fn main() -> purekafka::Result<()> {
    let o = options();
    // The brokers: the bootstrap list names every node of the clusters the
    // scripts start (a node killed and restarted comes back on its port).
    let broker_ports: Vec<u16> = o
        .bootstrap
        .split(',')
        .filter_map(|a| a.trim().rsplit(':').next()?.parse().ok())
        .collect();
    if o.heap_sample_kib > 0 {
        sites::start(o.heap_sample_kib << 10);
    }
    let tag = format!("soak-{}", std::process::id());
    let (input, output) = (format!("{tag}-in"), format!("{tag}-out"));
    let client = purekafka::ClientConfig::builder()
        .bootstrap_servers(&o.bootstrap)
        .client_id(&tag);
    let cluster = Cluster::connect(client.clone().build()?).await?;
    topics::create_topics(&cluster, &[&input, &output], 3).await?;

    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer =
        Producer::connect(ProducerConfig::builder().client(client.clone()).build()?).await?;
    let producing = {
        let (producer, produced, stop, topic, rate) = (
            producer.clone(),
            produced.clone(),
            stop.clone(),
            input.clone(),
            o.rate,
        );
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut id = 0u64;
            while !stop.load(AtomicOrdering::Relaxed) {
                let due = start + Duration::from_secs_f64(id as f64 / rate as f64);
                tokio::time::sleep_until(due).await;
                let record = ProducerRecord::new(&topic)
                    .key(format!("key-{}", id % 1_000))
                    .value(id.to_string());
                let produced = produced.clone();
                producer
                    .send_with_callback(record, move |r| {
                        if r.is_ok() {
                            produced.fetch_add(1, AtomicOrdering::Relaxed);
                        }
                    })
                    .await?;
                id += 1;
            }
            producer.flush().await;
            Ok::<u64, purekafka::Error>(id)
        })
    };

    let app = format!("{tag}-app");
    let streams = start_streams(&app, &o.bootstrap, &input, &output).await?;

    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client.clone())
            .group_id(format!("{tag}-reader"))
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .enable_auto_commit(false)
            .build()?,
    )
    .await?;
    consumer.subscribe([output.as_str()])?;

    println!(
        "soak: {} min at {} rec/s on {}, sampling every {} s; faults: rebalance every {} min, \
         leader kill every {} min (0 = never)",
        o.minutes,
        o.rate,
        o.bootstrap,
        o.sample.as_secs(),
        o.rebalance_every_min,
        o.leader_kill_every_min,
    );
    println!(
        "soak: pass rule, fixed before the run: nothing lost, every planned fault fired; after \
         the {} min warm-up: no socket in CLOSE_WAIT in two successive samples, at most \
         {CONNECTIONS_PER_BROKER} sockets per open client to each broker {broker_ports:?}, at \
         most {RUNTIME_FDS} runtime fds per live runtime ({BASE_RUNTIMES} + one per membership \
         thread) and no more membership threads than group members open ({MEMBERS_PER_INSTANCE} \
         per streams instance + the reader), the floor of the other fds rising by at most {OTHER_FDS_FLOOR_RISE} (first vs last quarter); live heap growth after the warm-up <= {:.0} bytes/h (floor of the \
         first vs the last quarter of the post-warm-up samples, at least {MIN_JUDGED_SAMPLES} of \
         them)",
        o.warmup_min, o.leak_bytes_per_hour
    );
    // A fault is due every `every` minutes, strictly before the run's end.
    let minutes_planned = |every: f64| {
        if every > 0.0 {
            ((o.minutes / every).ceil() as usize).saturating_sub(1)
        } else {
            0
        }
    };
    let (kills_planned, rebalances_planned) = (
        minutes_planned(o.leader_kill_every_min),
        minutes_planned(o.rebalance_every_min),
    );
    let run_for = Duration::from_secs_f64(o.minutes * 60.0);
    let run_end = tokio::time::Instant::now() + run_for;
    let killer = (kills_planned > 0).then(|| {
        tokio::spawn(kill_leaders(
            cluster.clone(),
            input.clone(),
            o.kafka_script.clone(),
            Duration::from_secs_f64(o.leader_kill_every_min * 60.0),
            o.restart_after,
            run_end,
        ))
    });
    // The second instance of the streams app, while it runs.
    let mut second: Option<purekafka::streams::RunningStreams> = None;
    // Records the second instance processed in its earlier lifetimes.
    let mut streamed_by_second = 0;
    let mut rebalances = 0usize;
    // Clients open at any time since the last sample (a leaving instance's
    // sockets may close just after the sample that follows its leave).
    let mut clients_since_sample = FIXED_CLIENTS + 1;
    let rebalance_every = Duration::from_secs_f64(o.rebalance_every_min.max(0.0) * 60.0);
    let mut next_rebalance = Instant::now() + rebalance_every;
    println!(
        "  elapsed  produced  streamed  consumed   rss_mib  heap_mib  fds  fds by peer port, other"
    );
    let started = Instant::now();
    // Sized for the whole run up front: a bitmap that doubles as it fills
    // shows up as steps in the heap column (1 MiB at 7.5 M ids).
    let mut seen = Seen::default();
    let expected_ids = (o.minutes * 60.0 * o.rate as f64 * 1.2) as usize;
    seen.bits.reserve_exact(expected_ids / 64 + 1);
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_sample = started + o.sample;
    let mut next_sites = started + o.sites_every;
    let mut last_commit = Instant::now();
    let mut drain_deadline: Option<Instant> = None;
    loop {
        for r in consumer.poll(Duration::from_millis(200)).await? {
            if let Some(id) = r.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) {
                if let Ok(id) = id.parse() {
                    seen.insert(id);
                }
            }
        }
        if last_commit.elapsed() >= Duration::from_secs(1) {
            consumer.commit_sync().await?;
            last_commit = Instant::now();
        }
        let now = Instant::now();
        if rebalances_planned > 0 && now >= next_rebalance && tokio::time::Instant::now() < run_end
        {
            next_rebalance += rebalance_every;
            match second.take() {
                Some(s) => {
                    streamed_by_second += s.metrics().processed;
                    s.shutdown().await.map_err(|e| {
                        purekafka::Error::config("soak second instance", e.to_string())
                    })?;
                    println!("soak: fault: the second streams instance left");
                }
                None => {
                    second = Some(start_streams(&app, &o.bootstrap, &input, &output).await?);
                    clients_since_sample = FIXED_CLIENTS + 2;
                    println!("soak: fault: a second streams instance joined");
                }
            }
            rebalances += 1;
        }
        if now >= next_sample {
            let (rss, fds) = (rss_kib(), Fds::read());
            let total_fds =
                fds.runtime + fds.other + fds.by_port.values().map(|e| e.0).sum::<usize>();
            let heap = LIVE_HEAP.load(AtomicOrdering::Relaxed);
            samples.push(Sample {
                at: started.elapsed().as_secs_f64(),
                heap,
                rss,
                fds: fds.clone(),
                clients: clients_since_sample,
            });
            clients_since_sample = FIXED_CLIENTS + 1 + usize::from(second.is_some());
            println!(
                "  {:>6.0}s  {:>8}  {:>8}  {:>8}  {:>8.1}  {:>8.1}  {:>3}  {}",
                started.elapsed().as_secs_f64(),
                produced.load(AtomicOrdering::Relaxed),
                streams.metrics().processed
                    + streamed_by_second
                    + second.as_ref().map_or(0, |s| s.metrics().processed),
                seen.count,
                rss as f64 / 1024.0,
                heap as f64 / (1 << 20) as f64,
                total_fds,
                fds
            );
            next_sample += o.sample;
        }
        if o.heap_sample_kib > 0 && now >= next_sites {
            sites::report(&format!("{:.0} s", started.elapsed().as_secs_f64()), 8, 12);
            next_sites += o.sites_every;
        }
        if streams.is_finished() {
            eprintln!("soak: the streams app stopped early");
            break;
        }
        if drain_deadline.is_none() && started.elapsed() >= run_for {
            stop.store(true, AtomicOrdering::Relaxed);
            drain_deadline = Some(now + Duration::from_secs(120));
        }
        if let Some(deadline) = drain_deadline {
            if producing.is_finished()
                && seen.count as u64 >= produced.load(AtomicOrdering::Relaxed)
                || now >= deadline
            {
                break;
            }
        }
    }
    let sent = match producing.await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(purekafka::Error::config("soak producer", e.to_string())),
    };
    let acked = produced.load(AtomicOrdering::Relaxed);
    sites::report("the end of the run, clients still open", 8, 12);
    let missing = (0..sent).filter(|id| !seen.contains(*id)).count();
    consumer.close().await?;
    streams
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("soak streams", e.to_string()))?;
    producer.close(Duration::from_secs(10)).await?;

    if let Some(s) = second.take() {
        s.shutdown()
            .await
            .map_err(|e| purekafka::Error::config("soak second instance", e.to_string()))?;
    }
    let kills = match killer {
        Some(k) => match k.await {
            Ok(Ok(nodes)) => nodes.len(),
            Ok(Err(e)) => {
                eprintln!("soak: a leader kill failed: {e}");
                0
            }
            Err(e) => {
                eprintln!("soak: the fault task failed: {e}");
                0
            }
        },
        None => 0,
    };

    let warmup_secs = o.warmup_min * 60.0;
    let heap = judge_heap(&samples, warmup_secs);
    let heap_ok = heap.growth_per_hour <= o.leak_bytes_per_hour;
    let fds = judge_fds(&samples, warmup_secs, &broker_ports);
    for over in &fds.over {
        println!("soak: more sockets to a broker than the clients' pools hold {over}");
    }
    for over in &fds.runtimes_over {
        println!("soak: runtime fds or membership threads over their bound {over}");
    }
    let faults_ok = kills == kills_planned && rebalances == rebalances_planned;
    let rss_max = samples.iter().map(|s| s.rss).max().unwrap_or(0);
    let passed = missing == 0 && sent == acked && faults_ok && fds.ok() && heap_ok;
    println!(
        "soak: {sent} sent, {acked} acked, {} consumed, {missing} missing; faults: {kills} of \
         {kills_planned} leader kills, {rebalances} of {rebalances_planned} rebalances; live heap \
         floor {:.2} -> {:.2} MiB over {} post-warm-up samples = {:+.0} bytes/h (bound {:.0}); \
         rss peak {:.1} MiB; fds: {} socket(s) in CLOSE_WAIT in two successive samples, {} \
         sample(s) over the bound, most sockets to one broker {} (bound {}), {} sample(s) with \
         runtime fds or membership threads over their bound (most {} runtime fds, {} threads), \
         other fds {}..{} (floor {} -> {}, bound +{OTHER_FDS_FLOOR_RISE}); {}",
        seen.count,
        heap.floors.0 as f64 / (1 << 20) as f64,
        heap.floors.1 as f64 / (1 << 20) as f64,
        heap.judged,
        heap.growth_per_hour,
        o.leak_bytes_per_hour,
        rss_max as f64 / 1024.0,
        fds.stuck,
        fds.over.len(),
        fds.peak.0,
        fds.peak.1,
        fds.runtimes_over.len(),
        fds.runtime_peak.0,
        fds.runtime_peak.1,
        fds.other.0,
        fds.other.1,
        fds.other_floors.map_or("-".to_owned(), |f| f.0.to_string()),
        fds.other_floors.map_or("-".to_owned(), |f| f.1.to_string()),
        if passed { "PASSED" } else { "FAILED" }
    );
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}
