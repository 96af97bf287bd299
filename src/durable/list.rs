//! [`DurableScheduler::list`]: the tasks of one state, a page at a time, an `impl` block of its
//! own. Every Redis call it makes goes through `scripts`.

use super::admin::MAX_PAGE;
use super::store::scripts;
use super::task::finished_places;
use super::time::unix_ms;
use super::{DurableScheduler, ListCursor, ListPage, TaskInfo, TaskState};
use crate::Error;

impl DurableScheduler {
    /// The tasks in `state`, `limit` at a time (1 to [`MAX_PAGE`]): pass the page's
    /// [`next`](ListPage::next) to read on. Each state has an order of its own, which only the
    /// tasks' own moves change, so that paging on while nothing changes lists every task of the
    /// state once:
    ///
    /// - [`Waiting`](TaskState::Waiting): by due time, then key (as
    ///   [`due_next`](Self::due_next) lists them, the ready ones left out);
    /// - [`Ready`](TaskState::Ready): by due time, then key;
    /// - [`Running`](TaskState::Running): in the order they were claimed (by claim token, then
    ///   key; each partition of a wheel numbers its claims on its own), each with
    ///   [`claimed_at`](TaskInfo::claimed_at) and the [`worker`](TaskInfo::worker) that holds it.
    ///   A task a worker claimed ahead of its handlers counts as running, and so does one whose
    ///   lease ran out until the next tick hands it out again;
    /// - [`Dead`](TaskState::Dead): by when they died, then key;
    /// - [`Finished`](TaskState::Finished): the runs the wheel's history keeps (see
    ///   [`DurableBuilder::history_limit`](super::DurableBuilder::history_limit)), newest first,
    ///   by when each ended, each with [`finished`](TaskInfo::finished). A task that ran many times (a series, or a
    ///   key scheduled again) shows once a run. Runs that end while an operator pages show
    ///   on no page but the first (they are newer); runs the history's bounds drop meanwhile
    ///   show on none.
    ///
    /// A task that changes state between two pages shows in the state it was in when its page
    /// was read, or in none; each other task shows once. Each page takes a few bounded script
    /// calls per partition, never a scan of the whole wheel (a page whose cursor's task left
    /// meanwhile reads past the tasks that share its time, up to it).
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::{DurableScheduler, TaskState}, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let mut page = timers.list(TaskState::Running, None, 100).await?;
    /// loop {
    ///     for task in page.tasks() {
    ///         println!("{} runs on {:?} since {:?}", task.key(), task.worker(), task.claimed_at());
    ///     }
    ///     let Some(next) = page.next().cloned() else { break };
    ///     page = timers.list(TaskState::Running, Some(&next), 100).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for a `limit` of 0 or over [`MAX_PAGE`], or a cursor of another state;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn list(&self, state: TaskState, after: Option<&ListCursor>, limit: usize) -> Result<ListPage, Error> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(format!("a page holds 1 to {MAX_PAGE} tasks (got {limit})")));
        }
        if let Some(cursor) = after.filter(|c| c.state != state) {
            return Err(Error::invalid(format!("a cursor of {:?} tasks cannot page the {state:?} ones", cursor.state)));
        }
        if state == TaskState::Finished {
            return self.list_finished(after, limit).await;
        }
        let (from, after_key) = after.map_or((0, ""), |c| (c.score, c.key.as_str()));
        let mut tasks: Vec<(u64, TaskInfo)> = Vec::new();
        // Where the partitions that read all they were asked for stopped: the page ends at the
        // first of those, so that nothing after it is left out.
        let mut stop: Option<(u64, String)> = None;
        for part in &self.wheel.partitions {
            if state == TaskState::Waiting {
                let got = self.due_next_in(&part.keys, (from, after_key), limit, true).await?;
                tasks.extend(got.into_iter().map(|t| (unix_ms(t.due), t)));
                continue;
            }
            let listed = scripts::list(&self.wheel, &part.keys, state, (from, after_key), limit).await?;
            tasks.extend(listed.tasks);
            if let Some(at) = listed.full {
                stop = Some(stop.map_or(at.clone(), |s| s.min(at)));
            }
        }
        tasks.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.key.cmp(&y.key)));
        if let Some((score, key)) = &stop {
            tasks.retain(|(s, t)| (*s, t.key.as_str()) <= (*score, key.as_str()));
        }
        let full = tasks.len() >= limit;
        tasks.truncate(limit);
        let next = match tasks.last() {
            Some((score, t)) if full || stop.is_some() => Some((*score, t.key.clone())),
            _ => stop,
        };
        let next = next.map(|(score, key)| ListCursor { state, score, key });
        Ok(ListPage { tasks: tasks.into_iter().map(|(_, t)| t).collect(), next })
    }

    /// [`list`](Self::list) of the finished runs: up to `limit` runs of each partition's history
    /// from where the cursor left it, merged newest first (by end time; a tie goes to the lower
    /// partition), each partition's in its own order, so that a page takes a run from a
    /// partition only after the newer ones of that partition.
    async fn list_finished(&self, after: Option<&ListCursor>, limit: usize) -> Result<ListPage, Error> {
        let partitions = self.wheel.partitions.len();
        let places = match after {
            None => None,
            Some(c) => match finished_places(&c.key) {
                Some(places) if places.len() == partitions => Some(places),
                _ => {
                    return Err(Error::invalid(format!(
                        "{c} is not a place in the history of a wheel of {partitions} partitions"
                    )))
                }
            },
        };
        // Each partition's runs, newest first, and where its history is to be read on.
        let mut read: Vec<(std::collections::VecDeque<(u64, TaskInfo)>, u64)> = Vec::with_capacity(partitions);
        for (q, part) in self.wheel.partitions.iter().enumerate() {
            let from = places.as_ref().map(|p| p[q]);
            let (numbered, runs) = scripts::history(&self.wheel, &part.keys, from, limit).await?;
            read.push((runs.into_iter().map(|r| (r.seq, r.task)).collect(), from.unwrap_or(numbered)));
        }
        let mut tasks = Vec::with_capacity(limit);
        while tasks.len() < limit {
            let newest = read
                .iter()
                .enumerate()
                .filter_map(|(q, (runs, _))| Some((q, runs.front()?.1.finished.map(|f| f.finished_at)?)))
                .max_by(|(p, a), (q, b)| a.cmp(b).then(q.cmp(p)));
            let Some((q, _)) = newest else { break };
            let (runs, place) = &mut read[q];
            let (seq, task) = runs.pop_front().expect("the partition has a run");
            *place = seq.saturating_sub(1);
            tasks.push(task);
        }
        let next = (tasks.len() == limit).then(|| ListCursor {
            state: TaskState::Finished,
            score: tasks.last().and_then(|t| t.finished).map_or(0, |f| unix_ms(f.finished_at)),
            key: read.iter().map(|(_, place)| place.to_string()).collect::<Vec<_>>().join(","),
        });
        Ok(ListPage { tasks, next })
    }
}
