//! Parameters by name: every float parameter of a module under its Burn path (`h.0.attn.c_attn.weight`),
//! read out, read back in, and (for autodiff backends) with its gradient. A checkpoint format is
//! then a renaming of these paths and a transpose here and there, written once per model.

use crate::checkpoint::{CheckpointError, NamedTensor};
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use std::collections::HashMap;
use std::path::Path;

#[derive(Default)]
struct PathTracker(Vec<String>);

impl PathTracker {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }

    fn exit(&mut self) {
        self.0.pop();
    }

    fn path(&self) -> String {
        self.0.join(".")
    }
}

/// Every float parameter's value, named by its Burn path, in Burn's layout.
pub fn export<B: Backend, M: Module<B>>(module: &M) -> Vec<NamedTensor> {
    struct V(PathTracker, Vec<NamedTensor>);
    impl<B: Backend> ModuleVisitor<B> for V {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.enter(name)
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.exit()
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.1
                .push(crate::tensor_to_named(&self.0.path(), param.val()));
        }
    }
    let mut v = V(PathTracker::default(), Vec::new());
    module.visit(&mut v);
    v.1
}

/// Every float parameter's Burn path and shape, read without initialising a parameter that is
/// still lazy: what a loader checks a file against before anything of the promised size exists.
pub fn shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<(String, Vec<usize>)> {
    struct V(PathTracker, Vec<(String, Vec<usize>)>);
    impl<B: Backend> ModuleVisitor<B> for V {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.enter(name)
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.exit()
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.1.push((self.0.path(), param.lazy_shape().to_vec()));
        }
    }
    let mut v = V(PathTracker::default(), Vec::new());
    module.visit(&mut v);
    v.1
}

/// Every float parameter's gradient in `grads`, named by its Burn path. A parameter the loss did
/// not reach gets zeros (that is its gradient), so the list always has every parameter.
pub fn export_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &B::Gradients,
) -> Vec<NamedTensor> {
    struct V<'a, B: AutodiffBackend>(PathTracker, Vec<NamedTensor>, &'a B::Gradients);
    impl<B: AutodiffBackend> ModuleVisitor<B> for V<'_, B> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.enter(name)
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.exit()
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let g = param
                .grad(self.2)
                .unwrap_or_else(|| param.val().inner().zeros_like());
            self.1.push(crate::tensor_to_named(&self.0.path(), g));
        }
    }
    let mut v = V::<B>(PathTracker::default(), Vec::new(), grads);
    module.visit(&mut v);
    v.1
}

/// Replaces every float parameter of `module` with the tensor of the same Burn path, checking
/// shapes; a missing or an extra tensor is an error naming `file`.
pub fn import<B: Backend, M: Module<B>>(
    module: M,
    mut tensors: HashMap<String, NamedTensor>,
    file: &Path,
) -> Result<M, CheckpointError> {
    struct Mp {
        path: PathTracker,
        tensors: HashMap<String, NamedTensor>,
        error: Option<CheckpointError>,
        file: std::path::PathBuf,
    }
    impl<B: Backend> ModuleMapper<B> for Mp {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.enter(name)
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.exit()
        }
        // The parameter is checked by its declared shape and replaced without ever being
        // initialised: a config that promises a huge model then costs nothing until a file holds
        // tensors of that size (a config.json claiming d_model 65536 and 48 layers beside a
        // small model.safetensors is an error, not 24 GB of random weights).
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let name = self.path.path();
            let Some(t) = self.tensors.remove(&name) else {
                self.error.get_or_insert(CheckpointError::Missing {
                    file: self.file.clone(),
                    name,
                });
                return param;
            };
            let expected = param.lazy_shape();
            if t.shape != expected.as_slice() {
                self.error.get_or_insert(CheckpointError::Shape {
                    file: self.file.clone(),
                    name,
                    expected: expected.to_vec(),
                    got: t.shape,
                });
                return param;
            }
            let id = param.id;
            let new = crate::named_to_tensor::<B, D>(t, &param.lazy_device());
            param.transform_for_load(new, id)
        }
    }
    let mut m = Mp {
        path: PathTracker::default(),
        tensors: std::mem::take(&mut tensors),
        error: None,
        file: file.to_path_buf(),
    };
    let module = module.map(&mut m);
    if let Some(e) = m.error {
        return Err(e);
    }
    if !m.tensors.is_empty() {
        let mut names: Vec<_> = m.tensors.into_keys().collect();
        names.sort();
        return Err(CheckpointError::format(
            file,
            format!("unexpected tensors: {}", names.join(", ")),
        ));
    }
    Ok(module)
}

/// Every float parameter's gradient as f64 values by Burn path (for parity tests on f64
/// backends, where going through f32 would throw away the precision being tested).
pub fn export_grads_f64<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &B::Gradients,
) -> Vec<(String, Vec<f64>)> {
    struct V<'a, B: AutodiffBackend>(PathTracker, Vec<(String, Vec<f64>)>, &'a B::Gradients);
    impl<B: AutodiffBackend> ModuleVisitor<B> for V<'_, B> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.enter(name)
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.exit()
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let g = param
                .grad(self.2)
                .unwrap_or_else(|| param.val().inner().zeros_like());
            self.1
                .push((self.0.path(), g.into_data().iter::<f64>().collect()));
        }
    }
    let mut v = V::<B>(PathTracker::default(), Vec::new(), grads);
    module.visit(&mut v);
    v.1
}
