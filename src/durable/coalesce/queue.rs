//! [`Coalescer`]: one kind of call on one partition, sent the way a batching client sends: a
//! call that finds fewer than [`Bounds::in_flight`] batches on the wire goes at once; calls that
//! arrive while that many are on the wire wait together and go as the next batch when one returns.
//!
//! There is no timer and no linger: a lone call is never held back. Nor is there a task while
//! nothing is queued: a call that finds fewer senders running than may be spawns one, which sends
//! batch after batch until it finds the queue empty, and ends. The sender is a task of its own so that a
//! caller that goes away (its future dropped) takes nothing down with it: every other caller of
//! its batch still gets its answer.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::time::Duration;
use tokio::sync::oneshot;

use tokio::time::Instant;

use crate::error::RedisFailure;
use crate::Error;

/// What one script call of a batch came to: one result per item, in the items' order.
pub(crate) type Answers<A> = Vec<Result<A, Error>>;

/// Sends one batch (never empty), whose first call was made at the given instant, and answers
/// for each of its items. A failure of the whole call is every item's error.
pub(crate) type SendBatch<I, A> =
    Box<dyn Fn(Vec<I>, Instant) -> Pin<Box<dyn Future<Output = Answers<A>> + Send>> + Send + Sync>;

/// How large a batch may grow, and how many go at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The most items in one batch.
    pub(crate) items: usize,
    /// The most bytes (as the caller weighs its item) in one batch; an item heavier than this
    /// goes alone.
    pub(crate) bytes: usize,
    /// The most batches on the wire at once: a call that finds fewer goes at once.
    pub(crate) in_flight: usize,
    /// How long a call may wait in the queue: one still queued when this has passed since it
    /// was made is not sent, and fails (`None`: no bound).
    pub(crate) window: Option<Duration>,
}

/// The calls of one kind on one partition, and their batches on the wire.
pub(crate) struct Coalescer<I, A> {
    shared: Arc<State<I, A>>,
}

struct State<I, A> {
    queue: Mutex<Queue<I, A>>,
    bounds: Bounds,
    send: SendBatch<I, A>,
}

struct Queue<I, A> {
    /// The calls not sent yet, in the order they came.
    waiting: VecDeque<Waiting<I, A>>,
    /// Sender tasks running: at most `bounds.in_flight`, each with at most one batch on the wire.
    senders: usize,
}

/// One call in the queue.
struct Waiting<I, A> {
    item: I,
    bytes: usize,
    /// When the call was made: a batch's calls give up counting from its first one's, so a call
    /// that waited in the queue behind batches on the wire has no longer for it.
    since: Instant,
    /// Its caller's end; closed when the caller has gone.
    reply: oneshot::Sender<Result<A, Error>>,
}

impl<I: Send + 'static, A: Send + 'static> Coalescer<I, A> {
    pub(crate) fn new(bounds: Bounds, send: SendBatch<I, A>) -> Self {
        debug_assert!(bounds.items >= 1 && bounds.in_flight >= 1, "a batch of none, or none in flight: {bounds:?}");
        let queue = Mutex::new(Queue { waiting: VecDeque::new(), senders: 0 });
        Coalescer { shared: Arc::new(State { queue, bounds, send }) }
    }

    /// Queues `item` (weighing `bytes` against the batch's bound) and waits for its answer. It
    /// goes at once if fewer than `in_flight` batches are on the wire, else with the next batch.
    ///
    /// Cancel safety: dropping the future before its batch went out takes the item out of the
    /// queue (it is not sent); dropping it later leaves the batch to run its course, and the
    /// item may land.
    pub(crate) async fn call(&self, item: I, bytes: usize) -> Result<A, Error> {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queue = self.shared.lock();
            queue.waiting.push_back(Waiting { item, bytes, since: Instant::now(), reply });
            let start = queue.senders < self.shared.bounds.in_flight;
            if start {
                queue.senders += 1;
            }
            start
        };
        if start {
            tokio::spawn(send_batches(self.shared.clone()));
        }
        answer.await.unwrap_or_else(|_| Err(sender_gone()))
    }
}

impl<I, A> State<I, A> {
    fn lock(&self) -> MutexGuard<'_, Queue<I, A>> {
        // No code that can panic runs under the lock; a poisoned one holds a sound queue.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<I, A> Queue<I, A> {
    /// Takes the next batch out of the queue: the calls in the order they came, up to the
    /// bounds, leaving out those whose callers have gone. A call that would take the batch past
    /// its bytes waits for the next batch, but the lighter calls behind it still go in this one
    /// (concurrent calls are in no order), so a heavy payload holds no one back; the first call
    /// always goes, so each waits for a bounded number of batches.
    fn next_batch(&mut self, bounds: &Bounds) -> Vec<Waiting<I, A>> {
        let mut batch: Vec<Waiting<I, A>> = Vec::new();
        let mut bytes = 0usize;
        let mut passed_over = VecDeque::new();
        let now = Instant::now();
        while batch.len() < bounds.items && passed_over.len() < bounds.items {
            let Some(call) = self.waiting.pop_front() else { break };
            if call.reply.is_closed() {
                continue;
            }
            if let Some(window) = bounds.window.filter(|w| call.since + *w <= now) {
                let _ = call.reply.send(Err(not_sent(window)));
                continue;
            }
            if !batch.is_empty() && bytes.saturating_add(call.bytes) > bounds.bytes {
                passed_over.push_back(call);
                continue;
            }
            bytes = bytes.saturating_add(call.bytes);
            batch.push(call);
        }
        if !passed_over.is_empty() {
            passed_over.append(&mut self.waiting);
            self.waiting = passed_over;
        }
        batch
    }
}

/// A sender task: sends the queue's batches one after the other until it finds none, then ends.
async fn send_batches<I, A>(shared: Arc<State<I, A>>) {
    let mut slot = SenderSlot { shared: &shared, finished: false };
    loop {
        let batch = {
            let mut queue = shared.lock();
            let batch = queue.next_batch(&shared.bounds);
            if batch.is_empty() {
                // Under the lock: a call queued after this starts a sender of its own.
                queue.senders -= 1;
                slot.finished = true;
                return;
            }
            batch
        };
        let first = batch.iter().map(|w| w.since).min().unwrap_or_else(Instant::now);
        let (items, replies): (Vec<I>, Vec<_>) = batch.into_iter().map(|w| (w.item, w.reply)).unzip();
        let count = items.len();
        let answers = (shared.send)(items, first).await;
        debug_assert_eq!(answers.len(), count, "a batch of {count} got {} answers", answers.len());
        let mut answers = answers.into_iter();
        for reply in replies {
            // The caller may have gone meanwhile: nobody is left to tell.
            let _ = reply.send(answers.next().unwrap_or_else(|| Err(sender_gone())));
        }
    }
}

/// A sender task that ends before it has emptied the queue (it panicked, or its runtime shut
/// down) gives up its place and, if it was the last, fails the calls still queued rather than
/// leave their callers waiting for a sender that never comes.
struct SenderSlot<'a, I, A> {
    shared: &'a State<I, A>,
    finished: bool,
}

impl<I, A> Drop for SenderSlot<'_, I, A> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut queue = self.shared.lock();
        queue.senders -= 1;
        if queue.senders == 0 {
            // Dropping a reply tells its caller `sender_gone`.
            queue.waiting.clear();
        }
    }
}

/// What a caller learns when its call waited its whole `window` in the queue, behind batches on
/// the wire that Redis did not answer: it was not sent.
fn not_sent(window: Duration) -> Error {
    Error::Redis(RedisFailure::new(
        "timed out",
        format!(
            "not sent: the call waited {window:?} (the connect timeout and one response timeout, which bound how \
             long a call tries) behind earlier calls that Redis did not answer: the link to Redis is down or too \
             slow, or the server is"
        ),
        true,
    ))
}

/// What a caller learns when its call's sender ended without an answer for it.
fn sender_gone() -> Error {
    Error::Redis(RedisFailure::new(
        "internal",
        "the task sending this call ended before Redis answered (its runtime shut down?); the call may have landed",
        false,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;

    /// A coalescer whose batches are recorded and answered (each item doubled) only when `go`
    /// is notified, so a test decides when the call on the wire returns.
    struct Fake {
        coalescer: Coalescer<u32, u32>,
        batches: Arc<Mutex<Vec<Vec<u32>>>>,
        /// Each batch's instant of its first call, as the sender was given it.
        firsts: Arc<Mutex<Vec<Instant>>>,
        on_wire: Arc<AtomicUsize>,
        go: Arc<Notify>,
    }

    fn fake(bounds: Bounds) -> Fake {
        let batches: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
        let firsts: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let on_wire = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(Notify::new());
        let (b, f, w, g) = (batches.clone(), firsts.clone(), on_wire.clone(), go.clone());
        let send: SendBatch<u32, u32> = Box::new(move |items: Vec<u32>, first| {
            let (b, w, g) = (b.clone(), w.clone(), g.clone());
            f.lock().unwrap().push(first);
            Box::pin(async move {
                b.lock().unwrap().push(items.clone());
                w.fetch_add(1, Ordering::SeqCst);
                g.notified().await;
                w.fetch_sub(1, Ordering::SeqCst);
                items.into_iter().map(|i| if i == 13 { Err(Error::NotFound) } else { Ok(i * 2) }).collect()
            })
        });
        Fake { coalescer: Coalescer::new(bounds, send), batches, firsts, on_wire, go }
    }

    const ONE: Bounds = Bounds { items: 4, bytes: 100, in_flight: 1, window: None };

    /// Calls `f`'s coalescer with item `i` of `bytes` from a task of its own.
    fn call(f: &Arc<Fake>, i: u32, bytes: usize) -> tokio::task::JoinHandle<Result<u32, Error>> {
        let f = f.clone();
        tokio::spawn(async move { f.coalescer.call(i, bytes).await })
    }

    /// Lets the spawned tasks run until they wait.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_call_goes_at_once_and_the_rest_wait_for_it_to_return() {
        let f = Arc::new(fake(ONE));
        let first = call(&f, 1, 1);
        settle().await;
        assert_eq!(*f.batches.lock().unwrap(), [vec![1]], "the lone call was held back");
        let rest: Vec<_> = (2..=7).map(|i| call(&f, i, 1)).collect();
        settle().await;
        assert_eq!(f.batches.lock().unwrap().len(), 1, "a second batch went while one was on the wire");
        f.go.notify_one();
        assert_eq!(first.await.unwrap(), Ok(2));
        settle().await;
        // The six that waited go as batches of at most four, one on the wire at a time.
        assert_eq!(f.batches.lock().unwrap()[1], [2, 3, 4, 5]);
        assert_eq!(f.on_wire.load(Ordering::SeqCst), 1);
        f.go.notify_one();
        settle().await;
        f.go.notify_one();
        for (i, call) in (2..=7).zip(rest) {
            assert_eq!(call.await.unwrap(), Ok(i * 2), "each caller gets its own answer");
        }
        assert_eq!(f.batches.lock().unwrap()[2], [6, 7]);
        assert_eq!(f.coalescer.shared.lock().senders, 0, "the sender did not end with the queue empty");
    }

    /// A batch is sent with the instant its first call was made, not the instant it went: the
    /// calls that waited behind a batch on the wire give up counting from when they were made.
    #[tokio::test(start_paused = true)]
    async fn a_batch_goes_with_the_instant_of_its_first_call() {
        let f = Arc::new(fake(ONE));
        let start = Instant::now();
        let first = call(&f, 1, 1);
        settle().await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let second = call(&f, 2, 1);
        settle().await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let third = call(&f, 3, 1);
        settle().await;
        tokio::time::advance(Duration::from_millis(300)).await;
        f.go.notify_one();
        settle().await;
        f.go.notify_one();
        assert_eq!(answers_of(vec![first, second, third]).await, [Ok(2), Ok(4), Ok(6)]);
        assert_eq!(*f.batches.lock().unwrap(), [vec![1], vec![2, 3]]);
        let firsts: Vec<Duration> = f.firsts.lock().unwrap().iter().map(|t| *t - start).collect();
        assert_eq!(firsts, [Duration::ZERO, Duration::from_millis(100)], "the second batch went 500 ms in");
    }

    /// A call still queued when its window has passed is not sent and fails; the calls made
    /// later go, in a batch timed from the first of them.
    #[tokio::test(start_paused = true)]
    async fn a_call_that_waited_its_window_is_not_sent() {
        let f = Arc::new(fake(Bounds { window: Some(Duration::from_millis(1000)), ..ONE }));
        let start = Instant::now();
        let first = call(&f, 1, 1);
        settle().await;
        let stale = call(&f, 2, 1);
        settle().await;
        tokio::time::advance(Duration::from_millis(900)).await;
        let fresh = call(&f, 3, 1);
        settle().await;
        tokio::time::advance(Duration::from_millis(200)).await;
        f.go.notify_one();
        assert_eq!(first.await.unwrap(), Ok(2));
        let err = stale.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("not sent"), "{err}");
        settle().await;
        f.go.notify_one();
        assert_eq!(fresh.await.unwrap(), Ok(6));
        assert_eq!(*f.batches.lock().unwrap(), [vec![1], vec![3]]);
        let firsts: Vec<Duration> = f.firsts.lock().unwrap().iter().map(|t| *t - start).collect();
        assert_eq!(firsts, [Duration::ZERO, Duration::from_millis(900)]);
    }

    #[tokio::test]
    async fn each_caller_gets_its_own_error() {
        let f = Arc::new(fake(ONE));
        let calls: Vec<_> = [12, 13, 14].into_iter().map(|i| call(&f, i, 1)).collect();
        settle().await;
        assert_eq!(*f.batches.lock().unwrap(), [vec![12, 13, 14]]);
        f.go.notify_one();
        assert_eq!(answers_of(calls).await, [Ok(24), Err(Error::NotFound), Ok(28)]);
    }

    async fn answers_of(calls: Vec<tokio::task::JoinHandle<Result<u32, Error>>>) -> Vec<Result<u32, Error>> {
        let mut out = Vec::new();
        for call in calls {
            out.push(call.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_heavy_item_goes_alone_and_holds_back_no_lighter_one() {
        let f = Arc::new(fake(ONE));
        let first = call(&f, 1, 1);
        settle().await;
        // Waiting behind the first: 60 + 50 bytes would pass 100, so 3 waits for the next batch
        // and 4 and 5 (light) go with 2; 6 (over the bound alone) goes alone.
        let rest = vec![call(&f, 2, 60), call(&f, 3, 50), call(&f, 4, 10), call(&f, 5, 10), call(&f, 6, 500)];
        settle().await;
        for _ in 0..4 {
            f.go.notify_one();
            settle().await;
        }
        assert_eq!(first.await.unwrap(), Ok(2));
        answers_of(rest).await;
        assert_eq!(*f.batches.lock().unwrap(), [vec![1], vec![2, 4, 5], vec![3], vec![6]]);
    }

    #[tokio::test]
    async fn a_caller_that_went_away_is_not_sent_and_breaks_no_batch() {
        let f = Arc::new(fake(ONE));
        let first = call(&f, 1, 1);
        settle().await;
        let (gone, stays) = (call(&f, 2, 1), call(&f, 3, 1));
        settle().await;
        gone.abort();
        settle().await;
        f.go.notify_one();
        settle().await;
        assert_eq!(f.batches.lock().unwrap()[1], [3], "a call whose caller had gone was sent");
        // Going away while on the wire: the others of the batch still get their answers.
        let (a, b) = (call(&f, 4, 1), call(&f, 5, 1));
        settle().await;
        stays.abort();
        f.go.notify_one();
        settle().await;
        f.go.notify_one();
        assert_eq!((first.await.unwrap(), a.await.unwrap(), b.await.unwrap()), (Ok(2), Ok(8), Ok(10)));
        assert_eq!(f.batches.lock().unwrap()[2], [4, 5]);
    }

    #[tokio::test]
    async fn two_in_flight_send_two_batches_at_once() {
        let f = Arc::new(fake(Bounds { in_flight: 2, ..ONE }));
        let mut calls = Vec::new();
        for i in 1..=2 {
            calls.push(call(&f, i, 1));
            settle().await;
        }
        assert_eq!(f.on_wire.load(Ordering::SeqCst), 2, "the second call waited for the first");
        calls.extend([call(&f, 3, 1), call(&f, 4, 1)]);
        settle().await;
        f.go.notify_waiters();
        settle().await;
        f.go.notify_waiters();
        settle().await;
        assert_eq!(answers_of(calls).await, [Ok(2), Ok(4), Ok(6), Ok(8)]);
        assert_eq!(*f.batches.lock().unwrap(), [vec![1], vec![2], vec![3, 4]]);
    }

    /// A sender that panics fails the calls of its batch (and any queued behind it), and the
    /// next call starts a new sender: no caller waits for good.
    #[tokio::test]
    async fn a_sender_that_panics_leaves_no_caller_waiting() {
        let send: SendBatch<u32, u32> = Box::new(|items: Vec<u32>, _| {
            Box::pin(async move {
                tokio::task::yield_now().await;
                assert!(!items.contains(&0), "a planted panic");
                items.into_iter().map(Ok).collect()
            })
        });
        let c = Arc::new(Coalescer::new(ONE, send));
        let call = |i: u32| {
            let c = c.clone();
            tokio::spawn(async move { c.call(i, 1).await })
        };
        let (a, b) = (call(0), call(1));
        assert_eq!(a.await.unwrap().unwrap_err(), sender_gone());
        assert_eq!(b.await.unwrap().unwrap_err(), sender_gone());
        assert_eq!(call(2).await.unwrap(), Ok(2));
    }
}
