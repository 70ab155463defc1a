//! The one place the concrete backend is named.
//!
//! Cargo features choose it (see the root `Cargo.toml`): `cuda` wins over `wgpu`, which wins over
//! `flex`, which wins over `ndarray`, so `--features wgpu` works without turning the default off.
//! Everything else in the workspace is generic over `B: Backend` (models, inference) or
//! `B: AutodiffBackend` (training) and is instantiated with the two aliases below.
//!
//! The GPU backends run without Burn's kernel fusion unless the `fusion` feature is on as well.
//! Burn's own `Cuda` and `Wgpu` types are fused, and in 0.21.0 fusion has known wrong-result bugs
//! (tracel-ai/burn#5122: a fused CUDA forward differs from the CPU's by 0.1 to 1 where the unfused
//! one agrees; several fusion fixes landed after 0.21.0). Here, the one fused CUDA run made, a
//! resumed 8-block video DiT, diverged within 500 steps of a state that trains on normally on the
//! CPU (`docs/video/deep-run/README.md`). Unfused is the same kernels launched one operation at a
//! time: slower on a GPU, but not subject to those bugs.

#[cfg(all(feature = "cuda", feature = "fusion"))]
mod chosen {
    pub type Backend = burn::backend::Cuda;
    pub const NAME: &str = "cuda (fused)";
    pub const PARTS: usize = 1;
}

#[cfg(all(feature = "cuda", not(feature = "fusion")))]
mod chosen {
    pub type Backend = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
    pub const NAME: &str = "cuda";
    pub const PARTS: usize = 1;
}

#[cfg(all(feature = "wgpu", feature = "fusion", not(feature = "cuda")))]
mod chosen {
    pub type Backend = burn::backend::Wgpu;
    pub const NAME: &str = "wgpu (fused)";
    pub const PARTS: usize = 1;
}

#[cfg(all(feature = "wgpu", not(feature = "fusion"), not(feature = "cuda")))]
mod chosen {
    pub type Backend = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;
    pub const NAME: &str = "wgpu";
    pub const PARTS: usize = 1;
}

#[cfg(all(feature = "flex", not(any(feature = "cuda", feature = "wgpu"))))]
mod chosen {
    pub type Backend = burn::backend::Flex;
    pub const NAME: &str = "flex";
    pub const PARTS: usize = 2;
}

#[cfg(all(
    feature = "ndarray",
    not(any(feature = "cuda", feature = "wgpu", feature = "flex"))
))]
mod chosen {
    pub type Backend = burn::backend::NdArray<f32>;
    pub const NAME: &str = "ndarray";
    pub const PARTS: usize = 2;
}

#[cfg(not(any(
    feature = "ndarray",
    feature = "flex",
    feature = "wgpu",
    feature = "cuda"
)))]
compile_error!("enable one backend feature: ndarray, flex, wgpu or cuda");

/// The backend inference and validation run on (f32).
pub type Infer = chosen::Backend;
/// The backend training runs on: [`Infer`] with autodiff.
pub type Train = burn::backend::Autodiff<Infer>;
/// The backend's name, for messages and benchmark tables.
pub const NAME: &str = chosen::NAME;

/// Threads a DiT or video DiT batch is cut across by default ([`crate::shard`]): two on the CPU
/// backends, whose elementwise arithmetic runs on one thread (`cargo xtask bench video --parts
/// 1,2` measures the gain), one on a GPU.
pub const PARTS: usize = chosen::PARTS;

/// The default device of the chosen backend (the first GPU, or the CPU).
pub fn device() -> burn::tensor::Device<Infer> {
    Default::default()
}
