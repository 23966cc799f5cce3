//! One confirmed change through a running server's webhook, as Rasa 3.6.21 records the
//! conversation: `select_subscription_change`, the confirmation question, the customer's
//! "yes", `apply_subscription_change`. Prints the apply's outcome as one JSON line. The
//! browser suite (scripts/console-browser.sh) makes its held change with it.
//!
//! confirm_change --server URL --sender ID --account ACCOUNT --subscription ID --change TYPE

use testkit::{Chat, ChatExt, Endpoint};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut server, mut sender, mut account, mut subscription, mut change) =
        (None, None, None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next();
        match flag.as_str() {
            "--server" => server = value,
            "--sender" => sender = value,
            "--account" => account = value,
            "--subscription" => subscription = value,
            "--change" => change = value,
            other => panic!("unknown flag {other}"),
        }
    }
    let need = |v: Option<String>, name: &str| v.unwrap_or_else(|| panic!("--{name} is required"));
    let (server, sender, account) = (
        need(server, "server"),
        need(sender, "sender"),
        need(account, "account"),
    );
    let (subscription, change) = (need(subscription, "subscription"), need(change, "change"));
    testkit::install_crypto();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = Endpoint::new(&server);
        let mut c = Chat::new(&sender, Some(&account));
        c.request_change(&server, &subscription, &change)
            .await
            .expect("select answers");
        let outcome = c.say_yes_and_apply(&server).await;
        println!("{outcome}");
    });
}
