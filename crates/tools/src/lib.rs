//! tools: what actiongate's developers run beside the product, outside its library. The
//! [`conversation_tests`] runner (`actiongate-dev converse`: Rasa Pro's end-to-end test cases
//! against a running Rasa), the consent matrix [`eval`] (`actiongate-dev eval`: every scenario
//! through the guard and through a naive baseline), and the load drivers in `examples/`
//! (`apply_load`, `soak`), and a [`stripe_proxy`] in front of localstripe. They speak to actiongate over the wire, as Rasa does, and never
//! link its library.

pub mod conversation_tests;
pub mod eval;
pub mod stripe_proxy;
