//! diffusers' own DiT against ours, llm.c style: `tests/fixtures/dit-tiny` is
//! `DiTTransformer2DModel.save_pretrained` of a 2-layer `ada_norm_zero` model (28×28, patch 4,
//! 4 heads × 32, 10 classes) with every parameter scrambled, and the output, the loss
//! `mean((output − target)²)` and every parameter's gradient diffusers computed for one batch.
//! Reproducing them checks the patch embedding and its conv layout, the 2-D position embedding,
//! the timestep frequencies (diffusers divides by half − 1), the adaLN chunk order, attention, the
//! output layer's shift-then-scale and the unpatchify order, against code nobody here wrote.
//!
//! Tolerance: PyTorch's f32 against our f64 from the same f32 weights; as for GPT-2, 2e-5 of each
//! tensor's largest value is ~100× the f32 rounding through two blocks, and far below any layout
//! mistake (which moves outputs by O(1)).

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_models::checkpoint::TensorFile;
use nervus_models::compare::{record, worst_rel};
use nervus_models::diffusers;
use std::path::PathBuf;

type TB = burn_ndarray::NdArray<f64>;
type AB = Autodiff<TB>;

const TOL: f64 = 2e-5;
/// The first timestep layer sees sin/cos of `t·f` with `t` up to 1000: PyTorch forms that argument
/// in f32, whose rounding there is ~1000 × 6e-8 = 6e-5 absolute, and the gradient of `linear_1`
/// (an outer product with the sinusoid) inherits it. Measured 5.0e-5; allowed 2e-4.
const TOL_TIMESTEP_LINEAR_1: f64 = 2e-4;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dit-tiny")
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn dit_fixture_output_loss_and_every_gradient() {
    let dev = Default::default();
    let model = diffusers::load_transformer::<AB>(&fixture(), &dev).expect("the fixture loads");
    let mut r = TensorFile::read(&fixture().join("reference.safetensors")).unwrap();
    let x = r.take("x", &[2, 1, 28, 28]).unwrap().data;
    let t = r.take("timestep", &[2]).unwrap().data;
    let labels = r.take("class_labels", &[2]).unwrap().data;
    let target = r.take("target", &[2, 1, 28, 28]).unwrap().data;
    let want_out = r.take("output", &[2, 1, 28, 28]).unwrap().data;
    let want_loss = r.tensors.remove("loss").expect("loss").data[0] as f64;

    let x = Tensor::<AB, 4>::from_data(TensorData::new(f64s(&x), [2, 1, 28, 28]), &dev);
    let t = Tensor::<AB, 1>::from_data(TensorData::new(f64s(&t), [2]), &dev);
    let labels = Tensor::<AB, 2, Int>::from_data(
        TensorData::new(labels.iter().map(|&v| v as i64).collect::<Vec<_>>(), [2, 1]),
        &dev,
    );
    let target = Tensor::<AB, 4>::from_data(TensorData::new(f64s(&target), [2, 1, 28, 28]), &dev);
    let out = model.forward(x, t, labels);
    let mut report = vec![(
        "output".to_string(),
        worst_rel(
            &out.clone().into_data().iter::<f64>().collect::<Vec<_>>(),
            &f64s(&want_out),
        ),
    )];
    let loss = (out - target).square().mean();
    let got_loss = loss.clone().into_scalar();
    report.push(("loss".into(), ((got_loss - want_loss) / want_loss).abs()));
    let grads = loss.backward();
    let named = diffusers::to_diffusers(
        nervus_models::named::export_grads(&model, &grads),
        model.config.patch_shape(),
    );
    assert_eq!(
        named.len(),
        44,
        "every parameter of the 2-layer model has a gradient"
    );
    let all = r.tensors.clone();
    for g in named {
        let want = r
            .take(&format!("grad.{}", g.name), &g.shape)
            .unwrap_or_else(|e| panic!("{e}"));
        if g.name.ends_with("attn1.to_k.bias") {
            // Adding one vector to every key shifts each row of scores by a constant, which the
            // softmax cannot see: the true gradient is exactly zero. Both sides must be rounding
            // noise next to the query bias's gradient; a relative comparison of noise is meaningless.
            let q = &all[&format!("grad.{}", g.name.replace("to_k", "to_q"))];
            let scale = q.data.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            let ours = g.data.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            let theirs = want.data.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            println!(
                "  key bias: ours {ours:.1e}, diffusers {theirs:.1e}, query bias scale {scale:.1e}"
            );
            assert!(
                ours < 1e-9 * scale && theirs < 1e-4 * scale,
                "{}: not zero",
                g.name
            );
            continue;
        }
        report.push((
            format!("grad.{}", g.name),
            worst_rel(&f64s(&g.data), &f64s(&want.data)),
        ));
    }
    let tol = |name: &str| {
        if name.ends_with("timestep_embedder.linear_1.weight") {
            TOL_TIMESTEP_LINEAR_1
        } else {
            TOL
        }
    };
    println!(
        "worst relative difference per tensor (tolerance {TOL:.0e}; {TOL_TIMESTEP_LINEAR_1:.0e} for timestep linear_1):"
    );
    for (name, v) in &report {
        println!("  {v:9.2e}  {name}");
        record(name, *v, tol(name));
    }
    // NaN is not within tolerance: `v <= tol` is false for NaN, and so is the filter's negation of it.
    let within = |n: &str, v: f64| v <= tol(n);
    let bad: Vec<_> = report.iter().filter(|(n, v)| !within(n, *v)).collect();
    assert!(bad.is_empty(), "outside tolerance: {bad:?}");
}

#[test]
fn our_save_loads_back_with_identical_output_and_diffusers_names() {
    let dev = Default::default();
    let model = diffusers::load_transformer::<TB>(&fixture(), &dev).unwrap();
    let dir = std::env::temp_dir().join(format!("nervus-dit-rt-{}", std::process::id()));
    diffusers::save_pipeline(&model, &dir).unwrap();
    let back = diffusers::load_transformer::<TB>(&dir.join("transformer"), &dev).unwrap();
    let x = Tensor::<TB, 4>::random([1, 1, 28, 28], burn::tensor::Distribution::Default, &dev);
    let t = Tensor::<TB, 1>::from_data([420.0], &dev);
    let l = Tensor::<TB, 2, Int>::from_data([[3i64]], &dev);
    let a: Vec<f64> = model
        .forward(x.clone(), t.clone(), l.clone())
        .into_data()
        .iter::<f64>()
        .collect();
    let b: Vec<f64> = back.forward(x, t, l).into_data().iter::<f64>().collect();
    assert_eq!(worst_rel(&b, &a), 0.0, "f32 weights round-trip exactly");
    let ours =
        TensorFile::read(&dir.join("transformer/diffusion_pytorch_model.safetensors")).unwrap();
    let theirs = TensorFile::read(&fixture().join("diffusion_pytorch_model.safetensors")).unwrap();
    let mut k1: Vec<_> = ours
        .tensors
        .iter()
        .map(|(k, v)| (k.clone(), v.shape.clone()))
        .collect();
    let mut k2: Vec<_> = theirs
        .tensors
        .iter()
        .map(|(k, v)| (k.clone(), v.shape.clone()))
        .collect();
    k1.sort();
    k2.sort();
    assert_eq!(k1, k2, "the same names and shapes diffusers writes");
    for f in [
        "model_index.json",
        "scheduler/scheduler_config.json",
        "transformer/config.json",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
