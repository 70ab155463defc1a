//! `cargo xtask bench <what>`.

use anyhow::{Result, bail};
use nervus_training::bench::{matmul_gflops, median, mlp_steps_per_sec};
use std::fmt::Write;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// What to measure: `backends` (ndarray against flex: 1024² matmul and an MLP training step).
    what: String,
    /// Interleaved rounds; medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

type NdArray = burn::backend::NdArray<f32>;
type Flex = burn::backend::Flex;

pub fn run(args: BenchArgs) -> Result<()> {
    match args.what.as_str() {
        "backends" => backends(args.rounds),
        other => bail!("unknown benchmark `{other}`: try backends"),
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn backends(rounds: usize) -> Result<()> {
    println!(
        "ndarray vs flex on {} threads, {rounds} interleaved rounds, medians",
        threads()
    );
    let (mut mm_nd, mut mm_fx, mut st_nd, mut st_fx) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        mm_nd.push(matmul_gflops::<NdArray>(1024, 10, &Default::default()));
        mm_fx.push(matmul_gflops::<Flex>(1024, 10, &Default::default()));
        st_nd.push(mlp_steps_per_sec::<burn::backend::Autodiff<NdArray>>(
            32,
            400,
            &Default::default(),
        ));
        st_fx.push(mlp_steps_per_sec::<burn::backend::Autodiff<Flex>>(
            32,
            400,
            &Default::default(),
        ));
        eprintln!("  round {}/{rounds} done", r + 1);
    }
    let mut t = String::new();
    writeln!(t, "| measurement | ndarray | flex | flex / ndarray |")?;
    writeln!(t, "|---|---|---|---|")?;
    let (a, b) = (median(&mm_nd), median(&mm_fx));
    writeln!(
        t,
        "| 1024² f32 matmul, GFLOP/s | {a:.1} | {b:.1} | {:.2} |",
        b / a
    )?;
    let (a, b) = (median(&st_nd), median(&st_fx));
    writeln!(
        t,
        "| MLP 784-128-10 training step, batch 32, steps/s | {a:.0} | {b:.0} | {:.2} |",
        b / a
    )?;
    print!("{t}");
    Ok(())
}
