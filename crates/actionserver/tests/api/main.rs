//! The SDK's integration tests, linked once: the README's example served and called as
//! Rasa calls it, the webhook protocol over real HTTP, and the SDK's additions as a user
//! meets them.

mod example;
mod protocol;
mod sdk;
