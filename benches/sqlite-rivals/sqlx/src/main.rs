//! The durable benchmark's SQLite rivals on SQLx 0.9, one measurement per run (`../common.rs` says how the
//! benchmark calls it): apalis-sqlite 1.0 (`--rival=apalis-sqlite`) and riverqueue 0.5, River's Rust client, on
//! its SQLite driver (`--rival=riverqueue`).

#[allow(dead_code)]
#[path = "../../common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../../compare/inputs.rs"]
mod compare_inputs;
#[allow(dead_code)]
#[path = "../../../durable/inputs.rs"]
mod inputs;
#[allow(dead_code)]
#[path = "../../../durable/lateness.rs"]
mod lateness;

mod apalis_sqlite_rival;
mod river;

fn main() {
    let args = common::Args::parse();
    match (args.rival.as_str(), args.workload.as_str()) {
        ("apalis-sqlite", "D124") => common::run::<apalis_sqlite_rival::Apalis, _, _>(args, |a, i| {
            common::d124::<apalis_sqlite_rival::Apalis>(a, i)
        }),
        ("apalis-sqlite", "D3") => common::run::<apalis_sqlite_rival::Apalis, _, _>(args, |a, i| {
            common::d3::<apalis_sqlite_rival::Apalis>(a, i)
        }),
        ("apalis-sqlite", "D7") => common::run::<apalis_sqlite_rival::Apalis, _, _>(args, |a, i| {
            common::d7::<apalis_sqlite_rival::Apalis>(a, i)
        }),
        ("riverqueue", "D124") => common::run::<river::River, _, _>(args, |a, i| common::d124::<river::River>(a, i)),
        ("riverqueue", "D3") => common::run::<river::River, _, _>(args, |a, i| common::d3::<river::River>(a, i)),
        ("riverqueue", "D7") => common::run::<river::River, _, _>(args, |a, i| common::d7::<river::River>(a, i)),
        (rival, workload) => panic!("unknown rival {rival:?} or workload {workload:?}"),
    }
}
