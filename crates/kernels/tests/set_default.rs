//! `backend::set_default` (its own test binary: it changes the process's backend).

use vllm_rs_kernels::backend::{self, Cpu};
use vllm_rs_kernels::isa::Tier;

#[test]
fn the_backend_set_for_the_process_is_the_default_and_is_set_once() {
    let scalar = Cpu::on(Tier::Scalar).unwrap();
    backend::set_default(scalar).unwrap();
    assert_eq!(backend::default().name(), "cpu-scalar");
    let names: Vec<&str> = backend::available().iter().map(|b| b.name()).collect();
    assert_eq!(names.last(), Some(&"cpu-scalar"), "the device backend is listed last: {names:?}");
    let err = backend::set_default(scalar).unwrap_err();
    assert!(err.contains("already runs on cpu-scalar"), "{err}");
}
