//! What the processes of one deployment say to one another about their circuit breakers (SPEC §8):
//! which part of the service a process runs, where a breaker stands, the operators' override, and
//! which state the cluster shows for a breaker its processes disagree on.

crate::text_enum! {
    /// What a `serve` process runs (`--role`): the API, the worker, or both.
    #[derive(clap::ValueEnum)]
    pub enum ProcessRole("process role", 3) {
        Api = "api",
        Worker = "worker",
        All = "all",
    }
}

crate::text_enum! {
    /// Where a breaker stands: by its own counts, or by an operator's override.
    pub enum BreakerState("breaker state", 5) {
        Closed = "closed",
        Open = "open",
        HalfOpen = "half_open",
        ForcedOpen = "forced_open",
        ForcedClosed = "forced_closed",
    }
}

crate::text_enum! {
    /// An operator's override of a breaker, as stored.
    pub enum BreakerOverride("breaker override", 2) {
        ForceOpen = "force_open",
        ForceClosed = "force_closed",
    }
}

impl BreakerOverride {
    /// The state a breaker under this override is in.
    pub fn state(self) -> BreakerState {
        match self {
            BreakerOverride::ForceOpen => BreakerState::ForcedOpen,
            BreakerOverride::ForceClosed => BreakerState::ForcedClosed,
        }
    }
}

impl BreakerState {
    /// How much a process's state says about the provider: refusing calls on its own counts
    /// (`open`) over probing (`half_open`) over passing them (`closed` or an override, which says
    /// nothing about the provider).
    fn severity(self) -> u8 {
        match self {
            BreakerState::Open => 2,
            BreakerState::HalfOpen => 1,
            BreakerState::Closed | BreakerState::ForcedOpen | BreakerState::ForcedClosed => 0,
        }
    }

    /// The state the cluster shows for one breaker: the override while one stands; otherwise the
    /// most severe state a live process reports; otherwise this process's own, or `closed`.
    pub fn of_cluster(
        forced: Option<BreakerOverride>,
        reported: impl IntoIterator<Item = BreakerState>,
        own: Option<BreakerState>,
    ) -> BreakerState {
        if let Some(forced) = forced {
            return forced.state();
        }
        reported.into_iter().max_by_key(|s| s.severity()).or(own).unwrap_or(BreakerState::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::BreakerState::*;
    use super::*;

    #[test]
    fn the_cluster_shows_the_override_then_the_worst_report_then_its_own() {
        use BreakerOverride::*;
        let cases = [
            (Some(ForceOpen), vec![Closed], Some(Closed), ForcedOpen),
            (Some(ForceClosed), vec![Open], Some(Open), ForcedClosed),
            (None, vec![Closed, Open, HalfOpen], Some(Closed), Open),
            (None, vec![Closed, HalfOpen], None, HalfOpen),
            (None, vec![Closed], Some(Open), Closed),
            (None, vec![], Some(HalfOpen), HalfOpen),
            (None, vec![], None, Closed),
        ];
        for (forced, reported, own, shown) in cases {
            assert_eq!(
                BreakerState::of_cluster(forced, reported.clone(), own),
                shown,
                "{forced:?} {reported:?} {own:?}"
            );
        }
    }

    #[test]
    fn names_round_trip() {
        crate::assert_text_enum_round_trips!(ProcessRole);
        crate::assert_text_enum_round_trips!(BreakerState);
        crate::assert_text_enum_round_trips!(BreakerOverride);
    }
}
