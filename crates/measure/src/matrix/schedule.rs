//! Who meets whom, when: rounds of disjoint pairs (a round-robin tournament), or one pair at a
//! time.

/// Every unordered pair of `n` endpoints exactly once, in rounds where no endpoint appears
/// twice: the circle method (endpoint 0 stays put, the others rotate). `n` endpoints take
/// `n - 1` rounds (`n` when odd: each round one endpoint sits out).
pub fn round_robin(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // An odd count gets a phantom endpoint; whoever meets it sits the round out.
    let m = n + n % 2;
    let mut rounds = Vec::with_capacity(m - 1);
    for r in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        for i in 0..m / 2 {
            let a = if i == 0 { 0 } else { (r + i - 1) % (m - 1) + 1 };
            let b = (r + m - 1 - i - 1) % (m - 1) + 1;
            let (a, b) = (a.min(b), a.max(b));
            if b < n {
                round.push((a, b));
            }
        }
        round.sort_unstable();
        rounds.push(round);
    }
    rounds
}

/// The same pairs, one per round.
pub fn one_at_a_time(n: usize) -> Vec<Vec<(usize, usize)>> {
    round_robin(n)
        .into_iter()
        .flatten()
        .map(|pair| vec![pair])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_pair_meets_once_in_rounds_of_disjoint_pairs() {
        for n in 0..=17 {
            let rounds = round_robin(n);
            let expected_rounds = if n < 2 { 0 } else { n - 1 + n % 2 };
            assert_eq!(rounds.len(), expected_rounds, "n={n}");
            let mut seen = BTreeSet::new();
            for round in &rounds {
                let mut busy = BTreeSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n, "n={n}: {a},{b}");
                    assert!(
                        busy.insert(a) && busy.insert(b),
                        "n={n}: rank twice in {round:?}"
                    );
                    assert!(seen.insert((a, b)), "n={n}: ({a},{b}) twice");
                }
                assert_eq!(round.len(), n / 2, "n={n}: a round leaves a pair idle");
            }
            assert_eq!(seen.len(), n * n.saturating_sub(1) / 2, "n={n}");
        }
    }

    #[test]
    fn one_pair_at_a_time_has_the_same_pairs() {
        let all: BTreeSet<_> = round_robin(6).into_iter().flatten().collect();
        let single = one_at_a_time(6);
        assert!(single.iter().all(|r| r.len() == 1));
        assert_eq!(single.into_iter().flatten().collect::<BTreeSet<_>>(), all);
    }
}
