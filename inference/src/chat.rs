//! A chat model's prompt, laid out as the model says: its `tokenizer.json` (through the
//! `tokenizers` crate) and its chat template (Jinja, rendered by `minijinja` with the settings
//! transformers renders it with: blocks trimmed, Python's string methods available).
//!
//! The template is read from `chat_template.jinja` (transformers 5 saves it there) or from the
//! `chat_template` key of `tokenizer_config.json` (where hub models keep it: a string, or a list
//! of named templates of which `default` is taken).

use std::path::{Path, PathBuf};

/// What went wrong, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {detail}", path.display())]
    Format { path: PathBuf, detail: String },
    #[error("{}: the chat template failed: {detail}", path.display())]
    Template { path: PathBuf, detail: String },
}

/// One turn of a conversation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A model directory's tokenizer and chat template.
pub struct Chat {
    tokenizer: tokenizers::Tokenizer,
    template: String,
    /// Where the template came from (named in errors).
    template_path: PathBuf,
    /// The special-token strings the template may refer to.
    bos_token: String,
    eos_token: String,
}

fn read(path: &Path) -> Result<String, ChatError> {
    std::fs::read_to_string(path).map_err(|source| ChatError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A special token in `tokenizer_config.json`: a string, or an object with `content`.
fn token_string(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(o)) => o
            .get("content")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

impl Chat {
    /// Reads `tokenizer.json`, `tokenizer_config.json` and the chat template in `dir`.
    pub fn load(dir: &Path) -> Result<Self, ChatError> {
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| {
            if !tok_path.is_file() {
                ChatError::Format {
                    path: tok_path.clone(),
                    detail: "missing (a chat model directory has its tokenizer.json)".into(),
                }
            } else {
                ChatError::Format {
                    path: tok_path.clone(),
                    detail: format!("not a tokenizer: {e}"),
                }
            }
        })?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.is_file() {
            serde_json::from_str(&read(&config_path)?).map_err(|e| ChatError::Format {
                path: config_path.clone(),
                detail: format!("not JSON: {e}"),
            })?
        } else {
            serde_json::Value::Null
        };
        let jinja = dir.join("chat_template.jinja");
        let (template, template_path) = if jinja.is_file() {
            (read(&jinja)?, jinja)
        } else {
            let t = match config.get("chat_template") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(|t| t.as_str())
                    .map(str::to_string),
                _ => None,
            };
            match t {
                Some(t) => (t, config_path.clone()),
                None => {
                    return Err(ChatError::Format {
                        path: dir.to_path_buf(),
                        detail: "no chat template (chat_template.jinja, or chat_template in \
                                 tokenizer_config.json): a base model cannot be asked; use an \
                                 instruct model"
                            .into(),
                    });
                }
            }
        };
        Ok(Self {
            tokenizer,
            template,
            template_path,
            bos_token: token_string(config.get("bos_token")),
            eos_token: token_string(config.get("eos_token")),
        })
    }

    /// The conversation as the model expects to read it; with `add_generation_prompt`, ending
    /// where the assistant's answer begins.
    pub fn prompt(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        let fail = |e: minijinja::Error| ChatError::Template {
            path: self.template_path.clone(),
            detail: e.to_string(),
        };
        let tmpl = env.template_from_str(&self.template).map_err(fail)?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(fail)
    }

    /// The ids of `text`, special tokens in it recognised, none added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| ChatError::Format {
                path: self.template_path.clone(),
                detail: format!("cannot tokenize the prompt: {e}"),
            })
    }

    /// The text of `ids` (special tokens kept, as transformers' `decode` keeps them).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids, false).unwrap_or_default()
    }

    /// The id of a token string, if the vocabulary has it.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}
