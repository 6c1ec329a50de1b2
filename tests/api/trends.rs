//! Trend charts (issue 33): after real traffic — withdrawals created and paid by a worker, two
//! rejected by the provider into review (each a dead letter), one of them failed by an operator —
//! the storage series count exactly what the rows say happened, bucket by bucket, and nothing in
//! a window before the traffic; the console's overview draws them as SVG a real Chromium shows,
//! with a point or bar for every nonzero value.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use fantoccini::Locator;
use serde_json::json;
use withdrawals::domain::{Category, WithdrawalId, WithdrawalStatus};
use withdrawals::storage::dead_letters::{self, DeadLetterFilter};
use withdrawals::storage::trends::{self, Trends, Window};
use withdrawals::storage::withdrawals as store;

use crate::both_backends;
use crate::browser::{screenshot_dir, Browser};
use crate::harness::TestApp;

both_backends!(
    the_series_count_what_happened_in_its_buckets_and_nothing_outside_the_window,
    closed_buckets_are_sealed_once_read_back_as_counted_and_pruned_as_they_age,
    a_window_sealed_second_by_second_reads_the_same_wherever_sealed_and_live_meet,
    the_overview_draws_the_charts_with_a_point_or_bar_for_every_nonzero_value,
);

const WAIT: Duration = Duration::from_secs(30);

/// Three paid, two rejected into review (one dead letter each), one of those failed by an
/// operator: returns every withdrawal's id.
async fn traffic(app: &TestApp) -> Vec<WithdrawalId> {
    let (mut ids, _) = app.rejected_withdrawals(2, "100.00", "10.00").await;
    let bob = app.customer("100.00").await;
    for i in 0..3 {
        let id = app.create_withdrawal(&bob, &format!("paid-{i}"), "5.00").await;
        app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
        ids.push(id);
    }
    let operator = app.operator("operator").await;
    let version = store::find(&app.db, ids[0]).await.unwrap().unwrap().version;
    let body = json!({"action": "fail", "reason": "account closed at the bank", "version": version});
    let failed = crate::ops::resolve(app, ids[0], &operator, body).await;
    assert_eq!(failed.status(), 200);
    ids
}

fn bucket_of(window: &Window, at: DateTime<Utc>) -> Option<usize> {
    let i = (at - window.start()).num_seconds().div_euclid(window.bucket_seconds);
    usize::try_from(i).ok().filter(|i| *i < window.buckets)
}

/// What the rows themselves say about `window`: each withdrawal's creation, its moves, and each
/// dead letter's failure put in their buckets; the review queue replayed move by move.
async fn expected(app: &TestApp, ids: &[WithdrawalId], window: &Window) -> Trends {
    let n = window.buckets;
    let mut t = Trends {
        created: vec![0; n],
        completed: vec![0; n],
        failed: vec![0; n],
        review_queue: vec![0; n],
        ..Trends::default()
    };
    let mut moves = Vec::new();
    for id in ids {
        let w = store::find(&app.db, *id).await.unwrap().unwrap();
        if let Some(i) = bucket_of(window, w.created_at) {
            t.created[i] += 1;
        }
        for m in store::transitions(&app.db, w.key()).await.unwrap() {
            match (m.to_status, bucket_of(window, m.at.0)) {
                (WithdrawalStatus::Completed, Some(i)) => t.completed[i] += 1,
                (WithdrawalStatus::Failed, Some(i)) => t.failed[i] += 1,
                _ => {}
            }
            moves.push((*id, m.at.0, m.to_status));
        }
    }
    for (i, start) in window.starts().into_iter().enumerate() {
        let end = start + TimeDelta::seconds(window.bucket_seconds);
        t.review_queue[i] = ids
            .iter()
            .filter(|id| {
                let last = moves.iter().filter(|(w, at, _)| w == *id && *at < end).max_by_key(|(_, at, _)| *at);
                last.is_some_and(|(_, _, to)| *to == WithdrawalStatus::RequiresReview)
            })
            .count() as i64;
    }
    let filter = DeadLetterFilter { limit: 100, ..DeadLetterFilter::default() };
    for listed in dead_letters::list(&app.db, &filter).await.unwrap() {
        let letter = listed.letter;
        if let Some(i) = bucket_of(window, letter.failed_at.0) {
            t.dead_letters.entry(letter.category).or_insert_with(|| vec![0; n])[i] += 1;
        }
    }
    t
}

async fn the_series_count_what_happened_in_its_buckets_and_nothing_outside_the_window(app: TestApp) {
    let before = Utc::now();
    let ids = traffic(&app).await;
    let now = Utc::now();

    for (bucket_seconds, buckets) in [(60, 60), (900, 96)] {
        let window = Window::ending_after(now, bucket_seconds, buckets);
        let got = trends::trends(&app.db, &window, Utc::now()).await.unwrap();
        assert_eq!(got, expected(&app, &ids, &window).await, "{bucket_seconds} s buckets");
        let sum = |v: &[i64]| v.iter().sum::<i64>();
        assert_eq!((sum(&got.created), sum(&got.completed), sum(&got.failed)), (5, 3, 1));
        assert_eq!(got.dead_letters.keys().collect::<Vec<_>>(), vec![&Category::DependencyRejected]);
        assert_eq!(sum(&got.dead_letters[&Category::DependencyRejected]), 2);
        assert_eq!(got.review_queue.last(), Some(&1), "one still waits for review");
        assert!(got.review_queue.iter().all(|n| (0..=2).contains(n)), "{:?}", got.review_queue);
    }

    // A window that ended before the traffic saw none of it, and nobody waiting for review.
    let past = Window::ending_after(before - TimeDelta::seconds(61), 60, 60);
    assert!(past.end <= before);
    let quiet = trends::trends(&app.db, &past, Utc::now()).await.unwrap();
    assert_eq!(quiet, Trends { review_queue: vec![0; 60], ..empty(60) });
    // A window after it: nothing happened, and one withdrawal waited all along.
    let later = Window::ending_after(now + TimeDelta::hours(3), 60, 60);
    let after = trends::trends(&app.db, &later, Utc::now()).await.unwrap();
    assert_eq!(after, Trends { review_queue: vec![1; 60], ..empty(60) });
}

/// The buckets of `window` sealed so far.
async fn sealed(app: &TestApp, window: &Window) -> usize {
    trends::sealed_starts(&app.db, window.bucket_seconds, window.start(), window.end).await.unwrap().len()
}

/// A bucket is sealed only once it closed `SETTLE` ago; read as of two hours later every bucket of
/// the window is sealed, and the window then comes from its sealed counts alone (nothing of it is
/// left to count live) and equals what the rows say, read after read. A day later the width's old
/// buckets are pruned as new ones are sealed.
async fn closed_buckets_are_sealed_once_read_back_as_counted_and_pruned_as_they_age(app: TestApp) {
    let ids = traffic(&app).await;
    let now = Utc::now();
    for (bucket_seconds, buckets) in [(60, 60), (900, 96)] {
        let window = Window::ending_after(now, bucket_seconds, buckets);
        let want = expected(&app, &ids, &window).await;
        assert_eq!(trends::trends(&app.db, &window, now).await.unwrap(), want, "{bucket_seconds} s, as of now");

        // As of now: exactly the buckets that closed SETTLE ago are sealed, none holding the traffic.
        let until = trends::seal(&app.db, &window, now).await.unwrap();
        assert!(until <= now - trends::SETTLE && until > now - trends::SETTLE - TimeDelta::seconds(bucket_seconds));
        let closed = usize::try_from((until - window.start()).num_seconds() / bucket_seconds).unwrap();
        assert_eq!(sealed(&app, &window).await, closed, "{bucket_seconds} s");
        assert!(closed < buckets);

        // Two hours on, every bucket has closed: the first read seals them all, and the window read
        // from its sealed counts alone is what the rows say, again and again.
        let later = now + TimeDelta::hours(2);
        assert_eq!(trends::seal(&app.db, &window, later).await.unwrap(), window.end);
        assert_eq!(sealed(&app, &window).await, buckets);
        for _ in 0..2 {
            assert_eq!(trends::trends(&app.db, &window, later).await.unwrap(), want, "{bucket_seconds} s, sealed");
        }
        let sum = |v: &[i64]| v.iter().sum::<i64>();
        assert_eq!((sum(&want.created), sum(&want.completed), sum(&want.failed)), (5, 3, 1));

        // Three days on, sealing that day's window prunes this one's buckets.
        let far = now + TimeDelta::days(3);
        trends::seal(&app.db, &Window::ending_after(far, bucket_seconds, buckets), far).await.unwrap();
        assert_eq!(sealed(&app, &window).await, 0, "{bucket_seconds} s buckets pruned");
    }
}

/// One-second buckets over the traffic, read as of every second from before it to after it: each
/// read seals one bucket more, so the line between the sealed buckets and the live tail crosses
/// every bucket of the traffic — a withdrawal created in a sealed bucket and moved in the live
/// tail, review moves on both sides — and every read equals what the rows say.
async fn a_window_sealed_second_by_second_reads_the_same_wherever_sealed_and_live_meet(app: TestApp) {
    let before = Utc::now() - TimeDelta::seconds(2);
    let ids = traffic(&app).await;
    let now = Utc::now();
    let buckets = usize::try_from((now - before).num_seconds() + 3).unwrap();
    let window = Window::ending_after(now, 1, buckets);
    let want = expected(&app, &ids, &window).await;
    let sum = |v: &[i64]| v.iter().sum::<i64>();
    assert_eq!((sum(&want.created), sum(&want.completed), sum(&want.failed)), (5, 3, 1));
    for (sealed_buckets, start) in window.starts().into_iter().enumerate() {
        let as_of = start + trends::SETTLE;
        assert_eq!(trends::trends(&app.db, &window, as_of).await.unwrap(), want, "{sealed_buckets} buckets sealed");
        assert_eq!(sealed(&app, &window).await, sealed_buckets);
    }
    let all = window.end + trends::SETTLE;
    assert_eq!(trends::trends(&app.db, &window, all).await.unwrap(), want, "every bucket sealed");
    assert_eq!(sealed(&app, &window).await, buckets);
}

fn empty(n: usize) -> Trends {
    Trends { created: vec![0; n], completed: vec![0; n], failed: vec![0; n], ..Trends::default() }
}

/// Clicks: sign in (the overview opens). Reads the charts' SVG as Chromium rendered it.
async fn the_overview_draws_the_charts_with_a_point_or_bar_for_every_nonzero_value(app: TestApp) {
    let ids = traffic(&app).await;
    let nonzero = |v: &[i64]| v.iter().filter(|x| **x != 0).count();
    assert_eq!(ids.len(), 5);

    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("viewer").await).await;
    browser.wait_for_text("Trends").await;
    // The page and the storage series must be of one window: a minute turning between the two
    // moves the hour by a bucket (one more minute of the review queue's 1). Load the page again
    // until no minute turned while it loaded.
    let hour = loop {
        let window = Window::ending_after(Utc::now(), 60, 60);
        browser.goto("/ops/overview").await;
        browser.wait_for_text("Trends").await;
        if Window::ending_after(Utc::now(), 60, 60) == window {
            break trends::trends(&app.db, &window, Utc::now()).await.unwrap();
        }
    };
    let count = |css: String| {
        let browser = &browser;
        async move { browser.client.find_all(Locator::Css(&css)).await.unwrap().len() }
    };
    for key in ["hour", "day"] {
        for chart in ["withdrawals", "dead-letters", "review"] {
            let svg = format!("#trend-{key}-{chart} svg[role=img]");
            assert_eq!(count(svg.clone()).await, 1, "{svg}");
        }
    }
    // The hour's charts: a point per nonzero minute of each line, a bar per nonzero category-minute.
    let points = |series: &'static str| count(format!("#trend-hour-withdrawals circle.point[data-series={series}]"));
    assert_eq!(points("created").await, nonzero(&hour.created));
    assert_eq!(points("completed").await, nonzero(&hour.completed));
    assert_eq!(points("failed").await, nonzero(&hour.failed));
    assert!(points("created").await >= 1);
    let bars = count("#trend-hour-dead-letters rect.bar[data-series=dependency_rejected]".into()).await;
    assert_eq!(bars, nonzero(&hour.dead_letters[&Category::DependencyRejected]));
    let review = count("#trend-hour-review circle.point".into()).await;
    assert_eq!(review, nonzero(&hour.review_queue));
    assert!(review >= 1);
    // Every drawn value is one the series holds, and they add up to the traffic.
    let values = browser
        .client
        .execute(
            "return [...document.querySelectorAll('#trend-hour-withdrawals circle.point')]
                 .map(c => [c.dataset.series, Number(c.dataset.value), c.getBBox().width > 0]);",
            vec![],
        )
        .await
        .unwrap();
    let values: Vec<(String, i64, bool)> = serde_json::from_value(values).unwrap();
    let total = |s: &str| values.iter().filter(|(n, _, _)| n == s).map(|(_, v, _)| v).sum::<i64>();
    assert_eq!((total("created"), total("completed"), total("failed")), (5, 3, 1));
    assert!(values.iter().all(|(_, _, drawn)| *drawn), "every point is laid out: {values:?}");
    let label = browser
        .client
        .find(Locator::Css("#trend-hour-withdrawals svg"))
        .await
        .unwrap()
        .attr("aria-label")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(label, "Withdrawals per minute: 5 created, 3 completed, 1 failed");
    let page = browser.body_text().await;
    assert!(page.contains("requires_review: 1 now"), "{page}");

    let shot = browser.screenshot("overview-charts").await;
    assert!(shot.starts_with(screenshot_dir()));
}
