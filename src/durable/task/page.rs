//! A page of `list` or `due_next` (`ListPage`), and where the next starts (`ListCursor`, as text).

use super::{TaskInfo, TaskState};

/// One page of [`list`](crate::durable::DurableScheduler::list) (the tasks of one state in that
/// state's order) or of [`due_next`](crate::durable::DurableScheduler::due_next), and where the
/// next page starts.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub(crate) tasks: Vec<TaskInfo>,
    pub(crate) next: Option<ListCursor>,
}

impl ListPage {
    /// The tasks of this page, in their state's order (see
    /// [`list`](crate::durable::DurableScheduler::list)).
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }

    /// Where the next page starts; `None` when this page reached the end.
    pub fn next(&self) -> Option<&ListCursor> {
        self.next.as_ref()
    }

    /// Takes the page apart into its tasks and the next page's cursor.
    pub fn into_parts(self) -> (Vec<TaskInfo>, Option<ListCursor>) {
        (self.tasks, self.next)
    }
}

/// Where a page of [`list`](crate::durable::DurableScheduler::list) ends: the next page starts
/// after this task in its state's order (its due time, its place in the claim order or its death
/// time, then its key), so a task that comes or goes meanwhile neither shifts nor repeats the
/// others. It belongs to one state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListCursor {
    pub(crate) state: TaskState,
    /// The due time in ms, the claim token (claim order), the death time in ms, or the end
    /// time in ms of the last finished run listed.
    pub(crate) score: u64,
    /// The task's key; for the finished runs, where each partition's history is to be read on:
    /// the number of the next run to read in each, comma-separated (see [`finished_places`]).
    pub(crate) key: String,
}

impl ListCursor {
    /// The state whose tasks it pages.
    pub fn state(&self) -> TaskState {
        self.state
    }
}

/// The cursor as text, to hand to another process or put in an address and read back with
/// [`str::parse`]: `<state>:<ms>:<key>`, the state in lower case (`waiting`, `ready`,
/// `running`, `dead`, `finished`), then the due, claim, death or end time in milliseconds since
/// the Unix epoch, then the key as it is (it may hold `:` itself: it is everything after the
/// second one). A cursor of finished runs holds the end time of the last run listed, then where
/// each partition's history is to be read on instead of a key: `finished:<ms>:<n>,<n>,...`.
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::{durable::{DurableScheduler, ListCursor, TaskState}, Error};
/// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
/// let page = timers.list(TaskState::Dead, None, 100).await?;
/// if let Some(next) = page.next() {
///     let text = next.to_string(); // "dead:1767225600000:order-42:review", say
///     let again: ListCursor = text.parse()?;
///     let _more = timers.list(TaskState::Dead, Some(&again), 100).await?;
/// }
/// # Ok(()) }
/// ```
impl std::fmt::Display for ListCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.state, self.score, self.key)
    }
}

/// Reads a cursor written by its [`Display`](std::fmt::Display) form.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for text not of the form `<state>:<ms>:<key>`.
impl std::str::FromStr for ListCursor {
    type Err = crate::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || crate::Error::invalid(format!("{text:?} is not a list cursor (<state>:<ms>:<key>)"));
        let mut parts = text.splitn(3, ':');
        let (Some(state), Some(score), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let state: TaskState = state.parse().map_err(|_| bad())?;
        let score = score.parse().map_err(|_| bad())?;
        if state == TaskState::Finished && finished_places(key).is_none() {
            return Err(bad());
        }
        Ok(ListCursor { state, score, key: key.to_owned() })
    }
}

/// Where each partition's history is to be read on, from the key of a cursor of finished runs:
/// the number of the next run to read in each partition, comma-separated, in partition order.
pub(crate) fn finished_places(key: &str) -> Option<Vec<u64>> {
    key.split(',').map(|n| n.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_cursor_reads_back_from_its_text() {
        for (state, key) in [
            (TaskState::Waiting, "plain"),
            (TaskState::Ready, "order-42:review"),
            (TaskState::Running, ""),
            (TaskState::Dead, "a key/with ?&=# and :: colons"),
        ] {
            let cursor = ListCursor { state, score: 1_767_225_600_123, key: key.to_owned() };
            let text = cursor.to_string();
            assert_eq!(text.parse::<ListCursor>().unwrap(), cursor, "{text}");
        }
        assert_eq!(ListCursor { state: TaskState::Dead, score: 7, key: "a:b".into() }.to_string(), "dead:7:a:b");
        let finished = ListCursor { state: TaskState::Finished, score: 1_767_225_600_123, key: "4,0,17".into() };
        assert_eq!(finished.to_string(), "finished:1767225600123:4,0,17");
        assert_eq!(finished.to_string().parse::<ListCursor>().unwrap(), finished);
        assert_eq!(finished_places(&finished.key), Some(vec![4, 0, 17]));
        for bad in [
            "",
            "dead",
            "dead:7",
            "gone:7:k",
            "dead:-1:k",
            "dead:x:k",
            "Dead:7:k",
            "finished:7:k",
            "finished:7:",
            "finished:7:4,x",
            "finished:7:4:0",
            "finished:7:-1",
        ] {
            assert!(matches!(bad.parse::<ListCursor>(), Err(crate::Error::Invalid(_))), "{bad:?}");
        }
    }
}
