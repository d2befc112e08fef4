//! Each DuckDB thread's own gRPC runtime and clients: a thread drives its requests' I/O itself
//! while it waits for them, with no hand-over to runtime threads and back (which cost the most
//! host CPU per row once the buffers were reused).

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use crate::client::Client;
use crate::settings::Settings;

struct Local {
    runtime: Rc<tokio::runtime::Runtime>,
    clients: HashMap<Settings, Arc<Client>>,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> R {
    LOCAL.with(|cell| {
        let mut local = cell.borrow_mut();
        let local = local.get_or_insert_with(|| Local {
            runtime: Rc::new(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("embedtext: cannot start a gRPC runtime"),
            ),
            clients: HashMap::new(),
        });
        f(local)
    })
}

/// This thread's client of `settings`' servers (its channels live on this thread's runtime).
pub fn client(settings: &Settings) -> Result<Arc<Client>, String> {
    with_local(|local| {
        if let Some(client) = local.clients.get(settings) {
            return Ok(client.clone());
        }
        let _entered = local.runtime.enter(); // the channels' connection tasks start on it
        let client = Arc::new(Client::new(settings).map_err(|e| e.message)?);
        local.clients.insert(settings.clone(), client.clone());
        Ok(client)
    })
}

/// Run `future` to completion on this thread's runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    // Out of the cell while it runs, so that the future may ask for a client.
    let runtime = with_local(|local| local.runtime.clone());
    runtime.block_on(future)
}
