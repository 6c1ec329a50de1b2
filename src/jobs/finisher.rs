//! Group commit of job completions: runs that finish with nothing else to write (a handler whose
//! effects live outside the jobs database, or none) are marked succeeded together, many per
//! transaction, instead of one transaction each.
//!
//! One task per worker drains a channel: it takes every completion waiting (up to a batch),
//! commits them with one fenced statement ([`job_store::succeed_many`]), answers each caller,
//! and takes the next lot — which piled up while that commit was in flight. Under load a batch
//! fills on its own; when idle a lone completion commits at once (no timer, no added latency).
//! Each run is still fenced by its own lease token: a run whose lease was lost is answered
//! `false` and its row left to the worker that holds it. Completions that carry their effects
//! (a payout's outcome, a dead letter) keep their own transaction; batching them would let one
//! run's failure roll back another's.
//!
//! One exception, for writes that cannot fail on another run's account: a run may hand over a
//! few plain writes of its own ([`Finisher::succeed_with`]) — a notification delivered to a
//! healthy endpoint, its attempt row and the notification marked delivered. They go in the same
//! transaction, after the fenced finish, and only for the runs whose lease held. Should the
//! transaction fail anyway, every run of the batch is answered the error and none is marked
//! succeeded: their jobs run again when their leases lapse, and a delivery is sent again —
//! at least once, as the notification contract says (SPEC §17), never lost. Two runs writing the
//! same notification row in one batch (an operator's redelivery beside the dispatcher's job)
//! both mark it delivered; PostgreSQL applies one of the two.

use std::collections::HashSet;

use tokio::sync::{mpsc, oneshot};

use crate::domain::{JobId, JobKey, LeaseToken};
use crate::storage::batch::{Sql, Writes};
use crate::storage::jobs as job_store;
use crate::storage::Db;

struct Completion {
    job: JobKey,
    token: LeaseToken,
    /// The run's own writes, applied with its finish if its lease held.
    writes: Vec<Sql>,
    reply: oneshot::Sender<Result<bool, String>>,
}

/// The sending side; cheap to clone. The committing task ends when every clone is dropped.
#[derive(Clone)]
pub struct Finisher {
    sender: mpsc::UnboundedSender<Completion>,
}

impl Finisher {
    /// Starts the committing task (inside a Tokio runtime); at most `max_batch` runs per commit.
    pub fn start(db: Db, max_batch: usize) -> Self {
        let (sender, mut receiver) = mpsc::unbounded_channel::<Completion>();
        let max_batch = max_batch.max(1);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(max_batch);
            while receiver.recv_many(&mut batch, max_batch).await > 0 {
                let result = commit(&db, &batch).await;
                for completion in batch.drain(..) {
                    let answer = match &result {
                        Ok(held) => Ok(held.contains(&completion.job.id)),
                        Err(err) => Err(err.clone()),
                    };
                    let _ = completion.reply.send(answer);
                }
            }
        });
        Self { sender }
    }

    /// Marks the run succeeded once its batch commits; false if its lease was lost.
    pub async fn succeed(&self, job: JobKey, token: LeaseToken) -> anyhow::Result<bool> {
        self.succeed_with(job, token, Vec::new()).await
    }

    /// [`Finisher::succeed`], with `writes` of the run's own committed alongside if its lease held
    /// (see the module documentation for what may go here).
    pub async fn succeed_with(&self, job: JobKey, token: LeaseToken, writes: Vec<Sql>) -> anyhow::Result<bool> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Completion { job, token, writes, reply })
            .map_err(|_| anyhow::anyhow!("the job finisher has stopped"))?;
        let answer = answer.await.map_err(|_| anyhow::anyhow!("the job finisher has stopped"))?;
        answer.map_err(|err| anyhow::anyhow!("finishing jobs in a batch failed: {err}"))
    }
}

async fn commit(db: &Db, batch: &[Completion]) -> Result<HashSet<JobId>, String> {
    let attempt = async {
        let runs: Vec<(JobKey, LeaseToken)> = batch.iter().map(|c| (c.job, c.token)).collect();
        let mut tx = db.begin().await?;
        let held: HashSet<JobId> = job_store::succeed_many(&mut tx, &runs).await?.into_iter().collect();
        let mut writes = Writes::new();
        for completion in batch.iter().filter(|c| held.contains(&c.job.id)) {
            for sql in &completion.writes {
                writes.push(sql.clone());
            }
        }
        writes.run(&mut tx).await?;
        tx.commit().await?;
        Ok::<_, crate::storage::StorageError>(held)
    };
    attempt.await.map_err(|err| format!("{:#}", anyhow::Error::from(err)))
}
