//! Answering from a corpus: the passages [`crate::retrieve`] finds for a question, put with the
//! question into an instruction-tuned reader's prompt through its own chat template, and the
//! answer streamed as it is generated.
//!
//! The prompt must leave room for the answer inside the reader's context. The retrieved text is
//! held to the budget (two fifths of the context in characters, [`crate::retrieve::budget`]):
//! passages are taken best first while they fit it. If the prompt is still too long in tokens,
//! the weakest passages go first, then the last one is shortened; a question that does not fit by
//! itself is refused.

use crate::chat::{Chat, ChatError, Message};
use crate::generate::{SampleOptions, TextStream, generate_with};
use crate::retrieve::{Passage, RetrieveError, Retriever, SearchOptions};
use burn::prelude::*;
use nervus_datasets::rng::Rng;
use nervus_models::checkpoint::CheckpointError;
use nervus_models::gpt::Gpt;
use nervus_models::qwen2::{self, Qwen2Config};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error(transparent)]
    Model(#[from] CheckpointError),
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error(transparent)]
    Retrieve(#[from] RetrieveError),
    #[error(
        "{}: the tokenizer has {tokenizer} ids and the model {model}: they are not one model's",
        dir.display()
    )]
    Vocabulary {
        dir: PathBuf,
        tokenizer: usize,
        model: usize,
    },
    #[error(
        "the question alone takes {tokens} tokens of the reader's {context} with {answer} kept for \
         the answer: ask a shorter question, or lower --max-tokens"
    )]
    TooLong {
        tokens: usize,
        context: usize,
        answer: usize,
    },
}

/// An instruction-tuned model that answers from passages: its weights, tokenizer and chat
/// template, and the ids that end its turn.
pub struct Reader<B: Backend> {
    pub model: Gpt<B>,
    pub chat: Chat,
    pub eos: Vec<u32>,
    pub dir: PathBuf,
}

impl<B: Backend> Reader<B> {
    /// Reads a Qwen2-family directory in transformers' layout (`config.json`,
    /// `model.safetensors`, `tokenizer.json`, the chat template).
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, AskError> {
        let chat = Chat::load(dir)?;
        let (model, config): (Gpt<B>, Qwen2Config) = qwen2::load(dir, device)?;
        // The tokenizer may know fewer ids than the embedding has rows (Qwen pads its table), never more.
        if chat.vocab_size() > model.config.vocab {
            return Err(AskError::Vocabulary {
                dir: dir.to_path_buf(),
                tokenizer: chat.vocab_size(),
                model: model.config.vocab,
            });
        }
        let mut eos = config.eos_ids();
        if let Some(id) = chat.id(chat.eos_token())
            && !eos.contains(&id)
        {
            eos.push(id);
        }
        Ok(Self {
            model,
            chat,
            eos,
            dir: dir.to_path_buf(),
        })
    }

    /// The context, in tokens, the reader reads.
    pub fn context(&self) -> usize {
        self.model.context()
    }
}

/// The instruction the reader is given with the passages.
pub const SYSTEM: &str = "Answer the question using only the numbered passages below. Cite the \
                          passage numbers you used. If the passages do not answer it, say so.";

/// The conversation for `question` and `passages` (numbered from 1, each with its address).
pub fn messages(question: &str, passages: &[(String, String)]) -> Vec<Message> {
    let mut user = String::new();
    for (i, (source, text)) in passages.iter().enumerate() {
        user.push_str(&format!("[{}] {source}\n{text}\n\n", i + 1));
    }
    user.push_str("Question: ");
    user.push_str(question);
    vec![Message::new("system", SYSTEM), Message::new("user", user)]
}

/// How an answer went.
#[derive(Clone, Debug)]
pub struct Answer {
    pub text: String,
    /// The passages the prompt held, as (address § section, characters).
    pub sources: Vec<(String, usize)>,
    pub prompt_tokens: usize,
    pub tokens: usize,
    /// Whether the reader ended its turn (rather than running out of `max_tokens`).
    pub finished: bool,
    pub search: Duration,
    pub first_token: Duration,
    pub total: Duration,
}

impl Answer {
    /// The passages the reader was given, numbered as in its prompt.
    pub fn sources_list(&self) -> String {
        let mut out = String::from("from:");
        for (i, (source, chars)) in self.sources.iter().enumerate() {
            out.push_str(&format!("\n  [{}] {source} ({chars} characters)", i + 1));
        }
        out
    }

    /// Search time, prompt size, time to the first token, and the tokens a second after it.
    pub fn timing(&self) -> String {
        let decoding = self.total.saturating_sub(self.first_token).as_secs_f64();
        format!(
            "search {:.1} ms; prompt {} tokens; first token after {:.2} s; {} tokens at {:.1} \
             tokens/s{}",
            self.search.as_secs_f64() * 1e3,
            self.prompt_tokens,
            self.first_token.as_secs_f64(),
            self.tokens,
            self.tokens.saturating_sub(1) as f64 / decoding.max(1e-9),
            if self.finished {
                ""
            } else {
                " (stopped at --max-tokens)"
            }
        )
    }
}

/// Searches `retriever` for `question`, fits the passages into `reader`'s prompt, and streams the
/// answer's text to `on_text` as it is generated.
pub fn ask<B: Backend>(
    reader: &Reader<B>,
    retriever: &mut Retriever,
    question: &str,
    search: &SearchOptions,
    sample: &SampleOptions,
    seed: u64,
    mut on_text: impl FnMut(&str),
) -> Result<Answer, AskError> {
    let start = Instant::now();
    let found = retriever.search(question, search)?;
    let searched = start.elapsed();
    let corpus = &retriever.corpus;
    let source = |p: &Passage| {
        let page = &corpus.pages[p.page];
        let section = &corpus.chunks[p.best].section;
        if section.is_empty() {
            page.url.clone()
        } else {
            format!("{} § {section}", page.url)
        }
    };
    // Best first, while the retrieved text fits the budget (the first always does).
    let mut kept: Vec<(String, String)> = Vec::new();
    let mut used = 0;
    for p in &found.passages {
        let n = p.text.chars().count();
        if !kept.is_empty() && used + n > search.budget {
            break;
        }
        used += n;
        kept.push((source(p), p.text.clone()));
    }
    let room = reader.context().saturating_sub(sample.length);
    let tokens_of = |kept: &[(String, String)]| -> Result<Vec<u32>, AskError> {
        let prompt = reader.chat.prompt(&messages(question, kept), true)?;
        Ok(reader.chat.encode(&prompt)?)
    };
    let mut prompt = tokens_of(&kept)?;
    while prompt.len() > room && kept.len() > 1 {
        kept.pop();
        prompt = tokens_of(&kept)?;
    }
    while prompt.len() > room && !kept.is_empty() {
        let text = &kept[0].1;
        let chars = text.chars().count();
        // Shorten by the share of tokens over, and a little more, until it fits or is gone.
        let keep = (chars as f64 * room as f64 / prompt.len() as f64 * 0.9) as usize;
        if keep == 0 {
            kept.clear();
        } else {
            kept[0].1 = text.chars().take(keep).collect();
        }
        prompt = tokens_of(&kept)?;
    }
    if prompt.len() > room {
        return Err(AskError::TooLong {
            tokens: prompt.len(),
            context: reader.context(),
            answer: sample.length,
        });
    }
    let sources = kept
        .iter()
        .map(|(s, t)| (s.clone(), t.chars().count()))
        .collect();
    let mut rng = Rng::new(seed);
    let mut first_token = None;
    let mut shown = TextStream::default();
    let mut finished = false;
    let eos = &reader.eos;
    let decode = |ids: &[u32]| reader.chat.decode(ids);
    let tokens = generate_with(&reader.model, &prompt, sample, &mut rng, |id| {
        first_token.get_or_insert_with(|| start.elapsed());
        if eos.contains(&id) {
            finished = true;
            return false;
        }
        shown.push(id, decode, &mut on_text);
        true
    });
    let text = shown.finish(decode, &mut on_text);
    Ok(Answer {
        text,
        sources,
        prompt_tokens: prompt.len(),
        tokens: tokens.len(),
        finished,
        search: searched,
        first_token: first_token.unwrap_or_default(),
        total: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieve::testing;

    type TB = burn_ndarray::NdArray<f64>;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/qwen2-tiny")
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        messages: Vec<serde_json::Value>,
        prompt: String,
        prompt_ids: Vec<u32>,
        greedy_ids: Vec<u32>,
        greedy_text: String,
    }

    /// transformers' chat template, tokenizer and greedy decoding of the scrambled tiny Qwen2
    /// (`make.py` beside the fixture), reproduced: the prompt string, its ids, the 24 ids drawn
    /// greedily with the KV cache, and their text.
    #[test]
    fn the_tiny_qwen2_writes_what_transformers_wrote_through_its_chat_template() {
        let reader = Reader::<TB>::load(&fixture(), &Default::default()).expect("fixture loads");
        let r: Reference = serde_json::from_str(
            &std::fs::read_to_string(fixture().join("reference.json")).unwrap(),
        )
        .unwrap();
        let messages: Vec<Message> = r
            .messages
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let prompt = reader.chat.prompt(&messages, true).unwrap();
        assert_eq!(prompt, r.prompt);
        let ids = reader.chat.encode(&prompt).unwrap();
        assert_eq!(ids, r.prompt_ids);
        assert_eq!(
            reader.eos,
            [2],
            "eos_token_id of config.json, <|im_end|> of the tokenizer"
        );
        let greedy = SampleOptions {
            length: r.greedy_ids.len(),
            temperature: 0.0,
            top_k: None,
        };
        let got = crate::generate::generate(&reader.model, &ids, &greedy, &mut Rng::new(0));
        assert_eq!(got, r.greedy_ids);
        assert_eq!(reader.chat.decode(&got), r.greedy_text);
    }

    /// A tokenizer that knows an id the embedding has no row for is refused before any
    /// generation could index past the table.
    #[test]
    fn a_tokenizer_with_more_ids_than_the_model_is_refused_naming_both() {
        let dir = std::env::temp_dir().join(format!("nervus-ask-vocab-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(fixture()).unwrap().flatten() {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        let path = dir.join("tokenizer.json");
        let mut tok: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        tok["added_tokens"].as_array_mut().unwrap().push(
            serde_json::json!({"id": 320, "content": "<|extra|>", "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
        );
        std::fs::write(&path, tok.to_string()).unwrap();
        let err = Reader::<TB>::load(&dir, &Default::default())
            .err()
            .expect("refused");
        assert!(
            matches!(
                err,
                AskError::Vocabulary {
                    tokenizer: 321,
                    model: 320,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("the tokenizer has 321 ids and the model 320"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_answer_fits_the_readers_context_with_its_passages_cut_to_fit() {
        let reader = Reader::<TB>::load(&fixture(), &Default::default()).expect("fixture loads");
        let dir = std::env::temp_dir().join(format!("nervus-ask-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("book.txt");
        let long = "Pushing onto a vector grows it; the vector reallocates when full. ".repeat(30);
        let (text, manifest) = testing::files(&[
            &["# Vectors", &long, "Reading from a vector by index."],
            &[
                "# Strings",
                "A string is UTF-8 text; pushing a char appends it.",
            ],
        ]);
        std::fs::write(&path, text).unwrap();
        std::fs::write(crate::retrieve::manifest_path(&path), manifest).unwrap();
        let mut retriever = Retriever::open(&path, true).unwrap();
        let search = SearchOptions {
            budget: crate::retrieve::budget(reader.context(), 4.0),
            ..SearchOptions::default()
        };
        let sample = SampleOptions {
            length: 16,
            temperature: 0.0,
            top_k: None,
        };
        let mut streamed = String::new();
        let answer = ask(
            &reader,
            &mut retriever,
            "how do I push onto a vector",
            &search,
            &sample,
            0,
            |t| streamed.push_str(t),
        )
        .unwrap();
        assert!(
            answer.prompt_tokens + sample.length <= reader.context(),
            "{answer:?}"
        );
        assert!(!answer.sources.is_empty(), "{answer:?}");
        assert!(
            answer.sources[0].0.ends_with("p0.html § Vectors"),
            "{answer:?}"
        );
        assert!(answer.tokens >= 1 && answer.tokens <= 16);
        assert_eq!(streamed, answer.text);

        // A question longer than the whole context is refused, naming the numbers.
        let huge = "vector ".repeat(400);
        let err = ask(&reader, &mut retriever, &huge, &search, &sample, 0, |_| {}).unwrap_err();
        assert!(matches!(err, AskError::TooLong { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
