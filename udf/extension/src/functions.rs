//! The SQL surface: the settings, `embed_text` in its forms, `embed_text_query`, and `embedtext_connect`.
//!
//! DuckDB's stable C API fixes a function's result type when the function is registered, so
//! `embed_text(text) -> FLOAT[dim]` is registered once the extension knows its server's dim: at
//! LOAD when the server (EMBEDTEXT_TARGET, else 127.0.0.1:50051) answers, or at
//! `SELECT embedtext_connect(...)`. Until then a stand-in `embed_text(ANY)` answers a call: it
//! registers embed_text(text) for the server in the settings and asks for the statement again
//! (a call has bound to the stand-in's type by then). Every call reads the settings as it binds.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libduckdb_sys::*;

use crate::client::{Chunking, EmbedOptions};
use crate::duck::{cstring, register_text_option, ClientContext, LogicalType};
use crate::execute;
use crate::local;
use crate::proto;
use crate::settings::{row_options, OnError, Settings, OPTIONS, ROW_OPTIONS};

/// The prompt sentence-transformers models name for a search query (arctic-embed, EmbeddingGemma, Qwen3-Embedding).
const QUERY_PROMPT: &str = "query";
/// How long LOAD waits for a server to learn embed_text's dim; a query waits its full deadline.
const LOAD_PROBE: Duration = Duration::from_secs(3);

/// What embed_text(text) was registered as in this database.
#[derive(Clone, Debug)]
struct Typed {
    dim: usize,
}

/// One LOAD's state, shared by its functions.
pub struct Extension {
    /// Kept only until embed_text(text) is registered: the connection to register it on.
    connection: Mutex<Option<duckdb_connection>>,
    typed: Mutex<Option<Typed>>,
    /// The target given to embedtext_connect, used where no SET names one.
    connected: Mutex<Option<String>>,
}

// The connection handle is only used under its mutex.
unsafe impl Send for Extension {}
unsafe impl Sync for Extension {}

impl Extension {
    fn settings(&self, context: Option<&ClientContext>, target: Option<String>) -> Result<Settings, String> {
        let connected = target.or_else(|| self.connected.lock().unwrap().clone());
        Settings::resolve(
            |name| context.and_then(|c| c.option(name)),
            |var| std::env::var(var).ok(),
            connected,
        )
    }

    fn info(&self, settings: &Settings, wait: Option<Duration>) -> Result<Arc<proto::InfoResponse>, String> {
        let client = local::client(settings)?;
        let call = client.info();
        local::block_on(async {
            match wait {
                Some(limit) => tokio::time::timeout(limit, call)
                    .await
                    .unwrap_or_else(|_| Err(crate::client::EmbedError::new("no answer".into()))),
                None => call.await,
            }
        })
        .map_err(|e| e.message)
    }

    /// Register embed_text(text) for the server in this context's settings (or `target`): the
    /// settings used, and what was registered.
    fn register_for(
        self: &Arc<Self>,
        context: &ClientContext,
        target: Option<String>,
    ) -> Result<(Settings, String), String> {
        let settings = self.settings(Some(context), target)?;
        let server = self.info(&settings, None)?;
        let registered = self.register_typed(&server)?;
        Ok((settings, registered))
    }

    /// Register embed_text(text) -> FLOAT[dim] for the default model of `settings`' server.
    fn register_typed(self: &Arc<Self>, info: &proto::InfoResponse) -> Result<String, String> {
        let model = find_model(info, None)?;
        let dim = model.dim as usize;
        let mut typed = self.typed.lock().unwrap();
        if let Some(existing) = typed.as_ref() {
            if existing.dim != dim {
                return Err(format!(
                    "embedtext: embed_text(text) is FLOAT[{}] in this database, but {} gives {dim} values; \
                     use embed_text(text, model) (FLOAT[]) or a new DuckDB session",
                    existing.dim, model.name
                ));
            }
            return Ok(format!("embed_text(text) -> FLOAT[{dim}]: {}", model.name));
        }
        let mut connection = self.connection.lock().unwrap();
        let Some(con) = *connection else {
            return Err("embedtext: the extension can no longer register functions; LOAD it again".into());
        };
        unsafe {
            register_set(con, "embed_text", &[Signature::typed(dim)], self)?;
            register_set(con, "embed_text_query", &[Signature::query(dim)], self)?;
            use DUCKDB_TYPE_DUCKDB_TYPE_INTEGER as INTEGER;
            use DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR as VARCHAR;
            let chunks = [
                Signature::chunks(dim, vec![VARCHAR]),
                Signature::chunks(dim, vec![VARCHAR, INTEGER]),
                Signature::chunks(dim, vec![VARCHAR, INTEGER, INTEGER]),
            ];
            register_set(con, "embed_text_chunks", &chunks, self)?;
        }
        *typed = Some(Typed { dim });
        unsafe { duckdb_disconnect(connection.as_mut().unwrap()) };
        *connection = None;
        Ok(format!("embed_text(text) -> FLOAT[{dim}]: {}", model.name))
    }
}

fn find_model<'a>(info: &'a proto::InfoResponse, name: Option<&str>) -> Result<&'a proto::ModelInfo, String> {
    let wanted = name.filter(|n| !n.is_empty()).unwrap_or(&info.default_model);
    info.models
        .iter()
        .find(|m| m.name == wanted || m.aliases.iter().any(|a| a == wanted))
        .ok_or_else(|| {
            let served: Vec<&str> = info.models.iter().map(|m| m.name.as_str()).collect();
            format!(
                "embedtext: model '{wanted}' is not served; served models: {}",
                served.join(", ")
            )
        })
}

/// What a bound call computes.
#[derive(Clone)]
pub(crate) enum Output {
    Array,            // FLOAT[dim]
    List,             // FLOAT[]
    Chunks(Chunking), // embed_text_chunks: STRUCT(..., embedding FLOAT[dim])[]
    Text(String),     // embedtext_connect's answer
}

#[derive(Clone)]
pub(crate) struct Bound {
    pub(crate) settings: Settings,
    pub(crate) options: EmbedOptions,
    pub(crate) on_error: OnError,
    pub(crate) dim: usize,
    pub(crate) timeout: Duration,
    pub(crate) output: Output,
}

#[derive(Clone, Copy)]
enum Kind {
    Typed(usize),  // embed_text(text) -> FLOAT[dim]
    Query(usize),  // embed_text_query(text) -> FLOAT[dim]: with the model's "query" prompt, where it has one
    Chunks(usize), // embed_text_chunks(text[, max_tokens[, overlap]]) -> STRUCT(..., embedding FLOAT[dim])[]
    Options,
    Connect,
    Pending, // embed_text(ANY) until embed_text(text) is registered: it registers it
}

struct Signature {
    kind: Kind,
    params: Vec<DUCKDB_TYPE>,
}

impl Signature {
    fn typed(dim: usize) -> Signature {
        Signature {
            kind: Kind::Typed(dim),
            params: vec![DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR],
        }
    }
    fn query(dim: usize) -> Signature {
        Signature {
            kind: Kind::Query(dim),
            params: vec![DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR],
        }
    }
    fn chunks(dim: usize, params: Vec<DUCKDB_TYPE>) -> Signature {
        Signature {
            kind: Kind::Chunks(dim),
            params,
        }
    }
    fn options(params: Vec<DUCKDB_TYPE>) -> Signature {
        Signature {
            kind: Kind::Options,
            params,
        }
    }
    fn connect(params: Vec<DUCKDB_TYPE>) -> Signature {
        Signature {
            kind: Kind::Connect,
            params,
        }
    }
    fn pending() -> Signature {
        Signature {
            kind: Kind::Pending,
            params: vec![DUCKDB_TYPE_DUCKDB_TYPE_ANY], // an exact VARCHAR overload, once there, is chosen first
        }
    }

    fn returns(&self) -> LogicalType {
        match self.kind {
            Kind::Typed(dim) | Kind::Query(dim) => LogicalType::float_array(dim),
            Kind::Chunks(dim) => LogicalType::chunk_list(dim),
            Kind::Options => LogicalType::float_list(),
            Kind::Connect | Kind::Pending => LogicalType::varchar(),
        }
    }
}

struct FunctionInfo {
    extension: Arc<Extension>,
    kind: Kind,
}

unsafe extern "C" fn drop_function_info(data: *mut c_void) {
    drop(Box::from_raw(data as *mut FunctionInfo));
}

unsafe extern "C" fn drop_bound(data: *mut c_void) {
    drop(Box::from_raw(data as *mut Bound));
}

unsafe extern "C" fn copy_bound(data: *mut c_void) -> *mut c_void {
    Box::into_raw(Box::new((*(data as *const Bound)).clone())) as *mut c_void
}

unsafe fn register_set(
    con: duckdb_connection,
    name: &str,
    signatures: &[Signature],
    extension: &Arc<Extension>,
) -> Result<(), String> {
    let cname = cstring(name);
    let mut set = duckdb_create_scalar_function_set(cname.as_ptr());
    for signature in signatures {
        let mut function = duckdb_create_scalar_function();
        duckdb_scalar_function_set_name(function, cname.as_ptr());
        for param in &signature.params {
            let t = LogicalType::of(*param);
            duckdb_scalar_function_add_parameter(function, t.0);
        }
        let returns = signature.returns();
        duckdb_scalar_function_set_return_type(function, returns.0);
        let info = Box::new(FunctionInfo {
            extension: extension.clone(),
            kind: signature.kind,
        });
        duckdb_scalar_function_set_extra_info(function, Box::into_raw(info) as *mut c_void, Some(drop_function_info));
        duckdb_scalar_function_set_bind(function, Some(bind));
        duckdb_scalar_function_set_function(function, Some(execute::execute));
        if matches!(signature.kind, Kind::Connect | Kind::Pending) {
            duckdb_scalar_function_set_volatile(function);
        } else {
            // NULLs reach the function (a NULL model is the default model; a NULL text gives NULL).
            duckdb_scalar_function_set_special_handling(function);
        }
        duckdb_add_scalar_function_to_set(set, function);
        duckdb_destroy_scalar_function(&mut function);
    }
    let state = duckdb_register_scalar_function_set(con, set);
    duckdb_destroy_scalar_function_set(&mut set);
    if state != DuckDBSuccess {
        return Err(format!("embedtext: DuckDB refused to register {name}"));
    }
    Ok(())
}

/// LOAD: the settings, embed_text(text, model[, dimensions]), embedtext_connect, and
/// embed_text(text) when a server answers now.
pub unsafe fn load(con: duckdb_connection) -> Result<(), String> {
    for (name, _, description) in OPTIONS {
        register_text_option(con, name, description)?;
    }
    for (name, description) in ROW_OPTIONS {
        register_text_option(con, name, description)?;
    }
    let extension = Arc::new(Extension {
        connection: Mutex::new(Some(con)),
        typed: Mutex::new(None),
        connected: Mutex::new(None),
    });
    use DUCKDB_TYPE_DUCKDB_TYPE_INTEGER as INTEGER;
    use DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR as VARCHAR;
    register_set(
        con,
        "embedtext_connect",
        &[Signature::connect(vec![]), Signature::connect(vec![VARCHAR])],
        &extension,
    )?;
    register_set(
        con,
        "embed_text",
        &[
            Signature::options(vec![VARCHAR, VARCHAR]),
            Signature::options(vec![VARCHAR, VARCHAR, INTEGER]),
            Signature::options(vec![VARCHAR, VARCHAR, INTEGER, VARCHAR]),
        ],
        &extension,
    )?;
    // A server that is not up yet is no error: embedtext_connect, or the stand-in's first call,
    // registers embed_text(text) later.
    if let Ok(settings) = extension.settings(None, None) {
        if let Ok(info) = extension.info(&settings, Some(LOAD_PROBE)) {
            extension.register_typed(&info)?;
            return Ok(());
        }
    }
    register_set(con, "embed_text", &[Signature::pending()], &extension)?;
    register_set(con, "embed_text_query", &[Signature::pending()], &extension)?;
    register_set(con, "embed_text_chunks", &[Signature::pending()], &extension)
}

unsafe extern "C" fn bind(info: duckdb_bind_info) {
    let result = catch_unwind(AssertUnwindSafe(|| bind_call(info)));
    let error = match result {
        Ok(Ok(bound)) => {
            duckdb_scalar_function_set_bind_data(info, Box::into_raw(Box::new(bound)) as *mut c_void, Some(drop_bound));
            duckdb_scalar_function_set_bind_data_copy(info, Some(copy_bound));
            return;
        }
        Ok(Err(message)) => message,
        Err(_) => "embedtext: internal error while binding".to_string(),
    };
    let message = cstring(&error);
    duckdb_scalar_function_bind_set_error(info, message.as_ptr());
}

unsafe fn bind_call(info: duckdb_bind_info) -> Result<Bound, String> {
    let function = &*(duckdb_scalar_function_bind_get_extra_info(info) as *const FunctionInfo);
    let extension = &function.extension;
    let context = ClientContext::of_scalar_bind(info);
    let arguments = duckdb_scalar_function_bind_get_argument_count(info) as usize;
    let constant = |index: usize, what: &str| {
        context
            .constant_argument(info, index)
            .map_err(|e| format!("embedtext: {what} {e}: it must be the same for every row of a query"))
    };
    match function.kind {
        Kind::Connect => {
            let target = if arguments > 0 {
                constant(0, "the target")?
            } else {
                None
            };
            let (settings, registered) = extension.register_for(&context, target.clone())?;
            if target.is_some() {
                *extension.connected.lock().unwrap() = target;
            }
            let text = format!("{registered} at {}", settings.targets.join(","));
            Ok(Bound {
                settings: settings.clone(),
                options: EmbedOptions {
                    model: String::new(),
                    dimensions: 0,
                    truncate: true,
                    prompt_name: String::new(),
                },
                on_error: OnError::Fail,
                dim: 0,
                timeout: settings.timeout,
                output: Output::Text(text),
            })
        }
        Kind::Pending => {
            if extension.typed.lock().unwrap().is_some() {
                return Err("embedtext: embed_text takes text: cast the argument to VARCHAR".into());
            }
            let (settings, registered) = extension.register_for(&context, None)?;
            Err(format!(
                "embedtext: {registered} at {} is registered now; run the statement again (no server answered \
                 when the extension was loaded, and DuckDB fixes a function's type when it is registered: \
                 SELECT embedtext_connect() after SET embedtext_target avoids this)",
                settings.targets.join(",")
            ))
        }
        Kind::Typed(_) | Kind::Query(_) | Kind::Chunks(_) | Kind::Options => {
            let settings = extension.settings(Some(&context), None)?;
            let (truncate, on_error) = row_options(|name| context.option(name))?;
            let server = extension.info(&settings, None)?;
            let prompt = if matches!(function.kind, Kind::Options) && arguments > 3 {
                constant(3, "prompt")?
            } else {
                None
            };
            let (model_name, dimensions) = if matches!(function.kind, Kind::Options) {
                let model = constant(1, "model")?;
                let dimensions = if arguments > 2 {
                    constant(2, "dimensions")?
                } else {
                    None
                };
                let dimensions = match dimensions {
                    Some(text) => Some(
                        text.parse::<i64>()
                            .map_err(|_| format!("embedtext: dimensions must be a whole number, not {text}"))?,
                    ),
                    None => None,
                };
                (model, dimensions)
            } else {
                (None, None)
            };
            let model = find_model(&server, model_name.as_deref())?;
            let prompt = match (function.kind, prompt) {
                // As the Python registration: the model's "query" prompt where it has one, else its default.
                (Kind::Query(_), _) => Some(QUERY_PROMPT.to_string()).filter(|name| model.prompts.contains_key(name)),
                (_, prompt) => prompt,
            };
            if let Some(name) = prompt.as_deref().filter(|name| !model.prompts.contains_key(*name)) {
                let mut known: Vec<String> = model.prompts.keys().map(|k| format!("'{k}'")).collect();
                known.sort();
                let known = if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                };
                return Err(format!(
                    "embedtext: model {} has no prompt '{name}'; its prompts: {known}",
                    model.name
                ));
            }
            let full = model.dim as usize;
            let dim = match dimensions {
                Some(d) if d < 1 || d as usize > full => {
                    return Err(format!(
                        "embedtext: dimensions={d} is not available: model {} has {full}",
                        model.name
                    ))
                }
                Some(d) => d as usize,
                None => full,
            };
            let output = if matches!(function.kind, Kind::Typed(_) | Kind::Query(_) | Kind::Chunks(_)) {
                let typed = extension.typed.lock().unwrap().clone();
                if typed.as_ref().is_some_and(|t| t.dim != dim) {
                    return Err(format!(
                        "embedtext: embed_text(text) is FLOAT[{}] in this database, but the server at {} serves {} \
                         with {dim} values; use embed_text(text, model) (FLOAT[]) or a new DuckDB session",
                        typed.unwrap().dim,
                        settings.targets.join(","),
                        model.name
                    ));
                }
                if matches!(function.kind, Kind::Chunks(_)) {
                    Output::Chunks(chunking(arguments, &constant)?)
                } else {
                    Output::Array
                }
            } else {
                Output::List
            };
            Ok(Bound {
                settings: settings.clone(),
                options: EmbedOptions {
                    model: model_name.unwrap_or_default(),
                    dimensions: dimensions.map_or(0, |d| d as u32),
                    truncate,
                    prompt_name: prompt.unwrap_or_default(),
                },
                on_error,
                dim,
                timeout: settings.timeout,
                output,
            })
        }
    }
}

/// embed_text_chunks' max_tokens (NULL or absent: as many as the model takes) and overlap (NULL or
/// absent: 0), as the Python function's macro defaults them.
fn chunking(
    arguments: usize,
    constant: impl Fn(usize, &str) -> Result<Option<String>, String>,
) -> Result<Chunking, String> {
    let number = |index: usize, what: &str, least: i64| -> Result<u32, String> {
        let text = if arguments > index {
            constant(index, what)?
        } else {
            None
        };
        let Some(text) = text else { return Ok(0) };
        match text.trim().parse::<i64>() {
            Ok(n) if n >= least && n <= u32::MAX as i64 => Ok(n as u32),
            _ => Err(format!(
                "embedtext: {what} must be a whole number of at least {least}, not {text}"
            )),
        }
    };
    Ok(Chunking {
        max_tokens: number(1, "max_tokens", 1)?,
        overlap: number(2, "overlap", 0)?,
    })
}

/// The extension's entry, after DuckDB handed it the API: connect, register, keep nothing global.
pub unsafe fn init(database: *mut duckdb_database) -> Result<(), String> {
    let mut con: duckdb_connection = null_mut();
    if database.is_null() || duckdb_connect(*database, &mut con) != DuckDBSuccess {
        return Err("embedtext: cannot connect to the database that loads the extension".into());
    }
    load(con)
}
