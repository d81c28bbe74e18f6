//! Waiting on one future per node until their answers decide, then a short grace for the rest:
//! what a connect or a read does when it has no round to decide it.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

/// Runs `asks`, one per node, at once, and returns their answers in node order.
///
/// - Until `decided` says the answers so far settle the question, every ask is waited for.
/// - From then on, the others get a grace: as long again as the decision took, and at least
///   `grace_floor`. One that has not answered by its end is `None`.
///
/// Why a grace rather than stopping at the decision: what answers just after it is usually a
/// healthy node that was a little slower, and its answer is worth a few milliseconds (a second
/// name of one server is found that way). A hung node is what the grace cuts off: it costs the
/// grace, not its whole timeout.
///
/// # Cancel safety
/// As cancel safe as the asks: dropping the future drops them.
pub(crate) async fn gather<T, F>(
    asks: impl IntoIterator<Item = F>,
    decided: impl Fn(&[Option<T>]) -> bool,
    grace_floor: Duration,
) -> Vec<Option<T>>
where
    F: Future<Output = T>,
{
    let start = Instant::now();
    let mut pending: FuturesUnordered<_> = asks
        .into_iter()
        .enumerate()
        .map(|(i, ask)| async move { (i, ask.await) })
        .collect();
    let mut answers: Vec<Option<T>> = std::iter::repeat_with(|| None)
        .take(pending.len())
        .collect();
    let mut until: Option<Instant> = None;
    loop {
        let next = match until {
            None => pending.next().await,
            Some(end) => match tokio::time::timeout_at(end, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some((i, answer)) = next else { break };
        if let Some(slot) = answers.get_mut(i) {
            *slot = Some(answer);
        }
        if until.is_none() && decided(&answers) {
            let now = Instant::now();
            until = Some(now + grace_floor.max(now - start));
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five asks that answer after 1, 2, 3, 4 ms and never; decided at three answers.
    fn asks() -> Vec<impl Future<Output = u64>> {
        [Some(1), Some(2), Some(3), Some(4), None]
            .into_iter()
            .map(|after: Option<u64>| async move {
                match after {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => std::future::pending::<()>().await,
                }
                after.unwrap_or_default()
            })
            .collect()
    }

    fn three_answered(answers: &[Option<u64>]) -> bool {
        answers.iter().flatten().count() >= 3
    }

    /// Mutation: no grace (`until` = the decision) loses the 4 ms answer; a grace of the
    /// hung ask's own (waiting for every ask) never returns.
    #[tokio::test(start_paused = true)]
    async fn a_hung_ask_costs_the_grace_and_a_slower_one_is_kept() {
        let start = Instant::now();
        let answers = gather(asks(), three_answered, Duration::from_millis(2)).await;
        assert_eq!(answers, [Some(1), Some(2), Some(3), Some(4), None]);
        // Decided at 3 ms; the grace is as long again (3 ms, above the 2 ms floor).
        assert_eq!(start.elapsed(), Duration::from_millis(6));
    }

    #[tokio::test(start_paused = true)]
    async fn the_grace_is_at_least_its_floor() {
        let start = Instant::now();
        let answers = gather(asks(), three_answered, Duration::from_millis(50)).await;
        assert_eq!(answers, [Some(1), Some(2), Some(3), Some(4), None]);
        assert_eq!(start.elapsed(), Duration::from_millis(53));
    }

    #[tokio::test(start_paused = true)]
    async fn undecided_answers_are_all_waited_for() {
        let answers = gather(asks().into_iter().take(4), |_| false, Duration::ZERO).await;
        assert_eq!(answers, [Some(1), Some(2), Some(3), Some(4)]);
    }
}
