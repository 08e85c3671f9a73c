//! Settings: `settings.get`, `settings.list`, `settings.set`.

use rusqlite::Connection as Store;
use serde_json::{json, Value};

use super::{optional, read, store_error, string_param, Caller};
use crate::protocol::{code, RpcError};
use crate::store::settings::{self, KNOWN};

/// The settings stored now, by name.
fn stored_settings(c: &Store) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = c.prepare("SELECT name, value FROM settings ORDER BY name")?;
    let rows = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect();
    rows
}

pub(super) fn get(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let name = string_param(params, "name")?;
    let default = settings::default_of(name)
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, format!("unknown setting '{name}'")))?;
    let stored = settings::get(c, name);
    Ok(json!({ "name": name, "value": stored, "default": default }))
}

pub(super) fn list(c: &Store) -> Result<Value, RpcError> {
    let stored = read(stored_settings(c))?;
    let known: Vec<Value> = KNOWN
        .iter()
        .map(|k| json!({ "name": k.name, "default": k.default, "meaning": k.meaning }))
        .collect();
    let stored: Vec<Value> = stored
        .into_iter()
        .map(|(n, v)| json!({ "name": n, "value": v }))
        .collect();
    Ok(json!({ "known": known, "stored": stored }))
}

pub(super) async fn set(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let name = string_param(params_value, "name")?;
    // A value is validated with the name (and a clearer message); an unset is not.
    if params_value.get("value").is_none_or(Value::is_null) && settings::default_of(name).is_none()
    {
        let names: Vec<&str> = KNOWN.iter().map(|known| known.name).collect();
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("unknown setting '{name}' (known: {})", names.join(", ")),
        ));
    }
    let value = optional::<String>(params_value, "value")?;
    corral.set_setting(name, value.as_deref()).await?;
    let stored = corral
        .read(|c| Ok(settings::get(c, name)))
        .map_err(store_error)?;
    Ok(json!({ "name": name, "value": stored }))
}
