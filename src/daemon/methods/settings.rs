//! Settings: `settings.get`, `settings.list`, `settings.set`.

use super::{read, Caller, Inspect, Serve};
use crate::protocol::*;
use crate::store::settings::{self, KNOWN};
use crate::store::sql::{self, args, Conn as Store};

/// The settings stored now, by name.
fn stored_settings(c: &Store) -> sql::Result<Vec<StoredSetting>> {
    c.rows(
        "SELECT name, value FROM settings ORDER BY name",
        args![],
        |row| {
            Ok(StoredSetting {
                name: row.get(0)?,
                value: row.get(1)?,
            })
        },
    )
}

impl Inspect for SettingsGet {
    fn inspect(c: &Store, p: SettingName) -> Result<Setting, RpcError> {
        let default = settings::default_of(&p.name).ok_or_else(|| {
            RpcError::new(code::NOT_FOUND, format!("unknown setting '{}'", p.name))
        })?;
        let value = settings::get(c, &p.name);
        Ok(Setting {
            name: p.name,
            value,
            default: default.to_string(),
        })
    }
}

impl Inspect for SettingsList {
    fn inspect(c: &Store, _: NoParams) -> Result<SettingsListResult, RpcError> {
        let known = KNOWN
            .iter()
            .map(|k| KnownSetting {
                name: k.name.into(),
                default: k.default.into(),
                meaning: k.meaning.into(),
            })
            .collect();
        Ok(SettingsListResult {
            known,
            stored: read(stored_settings(c))?,
        })
    }
}

impl Serve for SettingsSet {
    async fn serve(caller: &Caller, p: SettingsSetParams) -> Result<StoredSetting, RpcError> {
        let corral = caller.corral();
        let name = p.name.as_str();
        // A value is validated with the name (and a clearer message); an unset is not.
        if p.value.is_none() && settings::default_of(name).is_none() {
            let names: Vec<&str> = KNOWN.iter().map(|known| known.name).collect();
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("unknown setting '{name}' (known: {})", names.join(", ")),
            ));
        }
        corral.set_setting(name, p.value.as_deref()).await?;
        let value = corral.setting(name)?;
        Ok(StoredSetting {
            name: p.name,
            value,
        })
    }
}
