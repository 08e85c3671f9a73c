//! Settings: `settings.get`, `settings.set`, `settings.list`.

use serde::{Deserialize, Serialize};

use super::{method, named_params, NoParams};

method! {
    SettingsGet = "settings.get": SettingName => Setting,
    /// Sets a setting (validated), or unsets it with no value.
    SettingsSet = "settings.set": SettingsSetParams => StoredSetting,
    /// Every known setting with its default and meaning, and the ones stored.
    SettingsList = "settings.list": NoParams => SettingsListResult,
}

/// A setting by its name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SettingName {
    pub name: String,
}
named_params!(SettingName { name: string });

/// `settings.set {name, value}`: absent or null `value` unsets it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SettingsSetParams {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}
named_params!(SettingsSetParams {
    name: string,
    value: optional
});

/// `settings.get`'s answer: the stored value (null: the default applies).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setting {
    pub name: String,
    pub value: Option<String>,
    pub default: String,
}

/// A setting as stored (null: unset).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSetting {
    pub name: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SettingsListResult {
    pub known: Vec<KnownSetting>,
    pub stored: Vec<StoredSetting>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnownSetting {
    pub name: String,
    pub default: String,
    pub meaning: String,
}
