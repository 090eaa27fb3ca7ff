//! What a pair matrix (`ncclprobe matrix --json`) says: pairs, and nodes, far below the others.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::ev;
use crate::diagnose::finding::Hit;
use crate::documents::matrix::{analysis, By, MatrixDocument};

/// One hit per unordered pair with slow cells (every slow direction as evidence), and one per
/// endpoint whose pairs are all slow; `by` picks which kind of matrix this rule reads.
fn hits(inp: &Inputs, by: By) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (file, doc) in inp.matrices.iter().filter(|(_, d)| d.by == by) {
        for (e, ratio) in analysis::slow_endpoints(doc) {
            let label = &doc.endpoints[e].label;
            hits.push(Hit::new(
                format!(
                    "{} {label}: its pairs reach {ratio:.2}x the median {}'s one-way bandwidth",
                    kind(doc),
                    kind(doc)
                ),
                vec![ev(
                    file,
                    0,
                    format!(
                        "{label}: host {}, ranks {:?}",
                        doc.endpoints[e].host, doc.endpoints[e].ranks
                    ),
                )],
            ));
        }
        let mut pairs: Vec<(usize, usize)> = doc
            .outliers
            .iter()
            .map(|o| (o.from.min(o.to), o.from.max(o.to)))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        for (a, b) in pairs {
            let evidence = doc
                .outliers
                .iter()
                .filter(|o| (o.from.min(o.to), o.from.max(o.to)) == (a, b))
                .map(|o| ev(file, 0, analysis::describe(doc, o)))
                .collect();
            hits.push(Hit::new(
                format!(
                    "{} is far below the median pair",
                    doc.pair_label(a, b, crate::documents::matrix::Direction::TwoWay)
                ),
                evidence,
            ));
        }
    }
    hits
}

fn kind(doc: &MatrixDocument) -> &'static str {
    match doc.by {
        By::Rank => "rank",
        By::Node => "node",
    }
}

pub fn slow_pair(inp: &Inputs) -> Vec<Hit> {
    hits(inp, By::Rank)
}

pub fn slow_node(inp: &Inputs) -> Vec<Hit> {
    hits(inp, By::Node)
}
