//! `tokio-delayqueue`: a tokio-util `DelayQueue` owned by one task. The measuring code is that task, so inserts
//! and removes are direct calls; W3 drains the queue as a stream and feeds the sink.

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::time::{delay_queue::Key, DelayQueue};

use crate::inputs::{self, W12Inputs, W4_DELAY_MS};
use crate::measure::{self, IdleWindow, Rt, Snapshot, ROUNDS};
use crate::sink;
use crate::Workload;

const NAME: &str = "tokio-delayqueue";

pub fn run(rt: Rt, workload: Workload, n: usize, idle: IdleWindow) {
    match workload {
        Workload::W12 => measure::run_in_task(rt, w12(rt, n)),
        Workload::W3 => measure::run_in_task(rt, w3(rt, n)),
        Workload::W4 | Workload::W4Base => {
            let timers = if workload == Workload::W4 { n } else { 0 };
            let cpu_ms = measure::idle_runtime(rt, idle, move || async move {
                let mut queue = DelayQueue::new();
                for i in 0..timers {
                    queue.insert(i as u32, Duration::from_millis(W4_DELAY_MS));
                }
                // The owning task waits on the queue, as a real DelayQueue task would. The runtime's end ends it.
                tokio::spawn(async move {
                    while queue.next().await.is_some() {}
                    std::future::pending::<()>().await
                });
            });
            measure::emit(NAME, workload.name(), n, rt, &[("cpu_ms", cpu_ms)]);
        }
    }
}

async fn w12(rt: Rt, n: usize) {
    let inputs = W12Inputs::new(n);
    // DelayQueue::new(), not with_capacity: an application rarely knows its peak, and the other implementations
    // are not pre-sized either.
    let mut queue = DelayQueue::new();
    // The caller's key array, allocated and touched before the baseline.
    let mut keys: Vec<Option<Key>> = vec![None; n];
    for round in ROUNDS {
        let snap = Snapshot::take();
        for (i, &delay) in inputs.delays_ms.iter().enumerate() {
            keys[i] = Some(queue.insert(i as u32, Duration::from_millis(delay)));
        }
        let w1 = snap.finish();
        assert_eq!(queue.len(), n);

        let snap = Snapshot::take();
        let mut wrong = 0usize;
        for &i in &inputs.cancel_order {
            let key = keys[i as usize].take().expect("inserted in W1");
            if queue.remove(&key).into_inner() != i {
                wrong += 1;
            }
        }
        let w2 = snap.finish();
        assert_eq!(wrong, 0, "removes that did not return their own value");
        assert!(queue.is_empty());
        measure::emit_w12(NAME, round, n, rt, &w1, &w2, &[]);
    }
}

async fn w3(rt: Rt, n: usize) {
    let delays = inputs::w3_delays_ms(n);
    let sink = sink::install(n);
    let origin = Instant::from_std(sink.origin());
    let mut queue = DelayQueue::new();

    let cpu_before = measure::cpu_ns();
    let start = sink.now_ns();
    for (i, &delay) in delays.iter().enumerate() {
        let deadline = sink.now_ns() + delay * 1_000_000;
        sink.set_deadline(i, deadline);
        queue.insert_at(i as u32, origin + Duration::from_nanos(deadline));
    }
    let insert_end = sink.now_ns();
    // The stream ends when the queue is empty, i.e. when everything has fired.
    let drain = async {
        while let Some(expired) = queue.next().await {
            sink.fire(expired.into_inner() as usize);
        }
    };
    let _ = tokio::time::timeout(inputs::w3_time_limit(), drain).await;
    let cpu_ms = (measure::cpu_ns() - cpu_before) as f64 / 1e6;
    measure::emit(NAME, "W3", n, rt, &sink.w3_fields(start, insert_end, cpu_ms));
}
