//! The engine's terminal UI: the models on the left, the prompt and the continuation on the right,
//! the settings and the last run's speed at the bottom.
//!
//! Keys: type a prompt, Enter writes; Tab moves between the model list and the prompt; in the list
//! ↑/↓ choose and Enter loads; F2/F3 lower and raise the temperature (0 = greedy), F4/F5 the
//! tokens to write, F6 switches f32/q8 (reloading the model); Esc or Ctrl-C quits.
//!
//! [`App`] is the whole state and draws itself into any ratatui backend, so the tests drive it
//! with ratatui's `TestBackend`, key by key, headless.

use crate::engine::store::Store;
use crate::engine::{self, Engine, Quant, RunOptions};
use crate::generate::SampleOptions;
use burn::prelude::*;
use ratatui::Terminal;
use ratatui::backend::Backend as TermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, List, ListItem, ListState, Paragraph, Wrap};

/// Where the keys go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Models,
    Prompt,
}

/// What a key asks of the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Load the model at this index of [`App::models`].
    Load(usize),
    Generate,
}

/// The UI's state.
pub struct App<B: Backend> {
    pub models: Vec<String>,
    pub selected: usize,
    pub focus: Focus,
    pub prompt: String,
    pub output: String,
    pub status: String,
    pub temperature: f64,
    pub max_tokens: usize,
    pub quant: Quant,
    pub engine: Option<(String, Engine<B>)>,
}

impl<B: Backend> App<B> {
    /// The models in `store`, trained first.
    pub fn new(store: &Store) -> Self {
        let models = store
            .list_trained()
            .into_iter()
            .chain(store.list_downloaded())
            .map(|m| m.name)
            .collect();
        Self {
            models,
            selected: 0,
            focus: Focus::Models,
            prompt: String::new(),
            output: String::new(),
            status: "Tab: prompt/models · Enter: load or write · F2/F3 temperature · F4/F5 tokens · F6 f32/q8 · Esc: quit".into(),
            temperature: 0.8,
            max_tokens: 200,
            quant: Quant::F32,
            engine: None,
        }
    }

    /// Applies one key press.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.kind != KeyEventKind::Press {
            return Action::None;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        match k.code {
            KeyCode::Esc => return Action::Quit,
            KeyCode::Char('c') if ctrl => return Action::Quit,
            KeyCode::Tab => {
                self.focus = match self.focus {
                    Focus::Models => Focus::Prompt,
                    Focus::Prompt => Focus::Models,
                }
            }
            KeyCode::F(2) => self.temperature = ((self.temperature - 0.1) * 10.0).round() / 10.0,
            KeyCode::F(3) => self.temperature = ((self.temperature + 0.1) * 10.0).round() / 10.0,
            KeyCode::F(4) => self.max_tokens = self.max_tokens.saturating_sub(50).max(10),
            KeyCode::F(5) => self.max_tokens += 50,
            KeyCode::F(6) => {
                self.quant = match self.quant {
                    Quant::F32 => Quant::Q8,
                    Quant::Q8 => Quant::F32,
                };
                if self.engine.is_some() {
                    return Action::Load(self.selected);
                }
            }
            _ => {}
        }
        self.temperature = self.temperature.max(0.0);
        match (self.focus, k.code) {
            (Focus::Models, KeyCode::Up) => self.selected = self.selected.saturating_sub(1),
            (Focus::Models, KeyCode::Down) => {
                self.selected = (self.selected + 1).min(self.models.len().saturating_sub(1))
            }
            (Focus::Models, KeyCode::Enter) if !self.models.is_empty() => {
                return Action::Load(self.selected);
            }
            (Focus::Prompt, KeyCode::Enter) => return Action::Generate,
            (Focus::Prompt, KeyCode::Backspace) => {
                self.prompt.pop();
            }
            (Focus::Prompt, KeyCode::Char(c)) if !ctrl => self.prompt.push(c),
            _ => {}
        }
        Action::None
    }

    /// Loads model `i` (its name resolved by `store`).
    pub fn load(&mut self, store: &Store, i: usize, device: &B::Device) {
        let Some(name) = self.models.get(i).cloned() else {
            return;
        };
        self.engine = None;
        match engine::open::<B>(
            store,
            Some(&name),
            false,
            self.quant,
            device,
            &mut |_, _, _| {},
        ) {
            Ok((_, e)) => {
                self.status = e.summary.clone();
                self.engine = Some((name, e));
                self.focus = Focus::Prompt;
            }
            Err(e) => self.status = format!("error: {e}"),
        }
    }

    /// Continues the prompt, calling `redraw` as text arrives.
    pub fn generate(&mut self, seed: u64, mut redraw: impl FnMut(&Self)) {
        let Some((_, engine)) = self.engine.take() else {
            self.status = "no model loaded: choose one on the left and press Enter".into();
            return;
        };
        let opts = RunOptions {
            sample: SampleOptions {
                length: self.max_tokens,
                temperature: self.temperature,
                top_k: None,
            },
            seed,
            stop_at_eos: true,
        };
        self.output.clear();
        let prompt = self.prompt.clone();
        let result = engine.run(&prompt, &opts, |text| {
            self.output.push_str(text);
            redraw(self);
        });
        self.status = match result {
            Ok(r) => r.timing(),
            Err(e) => format!("error: {e}"),
        };
        let name = self.models.get(self.selected).cloned().unwrap_or_default();
        self.engine = Some((name, engine));
    }

    /// Draws the whole UI.
    pub fn draw(&self, frame: &mut ratatui::Frame) {
        let [main, bottom] =
            Layout::vertical([Constraint::Min(5), Constraint::Length(4)]).areas(frame.area());
        let [left, right] =
            Layout::horizontal([Constraint::Length(28), Constraint::Min(20)]).areas(main);
        let [prompt_area, output_area] =
            Layout::vertical([Constraint::Length(3), Constraint::Min(3)]).areas(right);
        let focused = |f: Focus| {
            if self.focus == f {
                Style::default().add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            }
        };
        let loaded = self.engine.as_ref().map(|(n, _)| n.as_str());
        let items: Vec<ListItem> = if self.models.is_empty() {
            vec![ListItem::new("(none: engine train …)")]
        } else {
            self.models
                .iter()
                .map(|m| {
                    let mark = if Some(m.as_str()) == loaded {
                        "● "
                    } else {
                        "  "
                    };
                    ListItem::new(format!("{mark}{m}"))
                })
                .collect()
        };
        let mut state = ListState::default().with_selected(Some(self.selected));
        frame.render_stateful_widget(
            List::new(items)
                .block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title("models")
                        .title_style(focused(Focus::Models)),
                )
                .highlight_symbol("> "),
            left,
            &mut state,
        );
        frame.render_widget(
            Paragraph::new(self.prompt.as_str()).block(
                Block::default()
                    .borders(Borders::ALL)
                    .title("prompt")
                    .title_style(focused(Focus::Prompt)),
            ),
            prompt_area,
        );
        frame.render_widget(
            Paragraph::new(format!("{}{}", self.prompt, self.output))
                .wrap(Wrap { trim: false })
                .block(Block::default().borders(Borders::ALL).title("output")),
            output_area,
        );
        let settings = format!(
            "model {} · temperature {} · tokens {} · weights {}",
            loaded.unwrap_or("(none)"),
            if self.temperature <= 0.0 {
                "0 (greedy)".to_string()
            } else {
                format!("{:.1}", self.temperature)
            },
            self.max_tokens,
            match self.quant {
                Quant::F32 => "f32",
                Quant::Q8 => "q8",
            }
        );
        frame.render_widget(
            Paragraph::new(format!("{settings}\n{}", self.status))
                .wrap(Wrap { trim: true })
                .block(Block::default().borders(Borders::TOP)),
            bottom,
        );
    }
}

/// Runs the UI in the terminal until Esc, opening `model` first when given.
pub fn run<B: Backend>(store: &Store, model: Option<&str>, quant: Quant) -> anyhow::Result<()> {
    let device = B::Device::default();
    let mut app = App::<B>::new(store);
    app.quant = quant;
    let first = model
        .map(str::to_string)
        .or_else(|| store.default_model().ok().flatten());
    if let Some(m) = first {
        let i = match app.models.iter().position(|n| *n == m) {
            Some(i) => i,
            None => {
                // A directory or a repo id that is not listed: it joins the list.
                app.models.push(m);
                app.models.len() - 1
            }
        };
        app.selected = i;
        app.load(store, i, &device);
    }
    let mut terminal = ratatui::try_init().map_err(|e| {
        anyhow::anyhow!("the TUI needs a terminal (standard input and output not redirected): {e}")
    })?;
    let result = event_loop(&mut terminal, &mut app, store, &device);
    ratatui::restore();
    result
}

fn event_loop<T: TermBackend, B: Backend>(
    terminal: &mut Terminal<T>,
    app: &mut App<B>,
    store: &Store,
    device: &B::Device,
) -> anyhow::Result<()>
where
    T::Error: Send + Sync + 'static,
{
    let mut seed = 1;
    loop {
        terminal.draw(|f| app.draw(f))?;
        let Event::Key(k) = event::read()? else {
            continue;
        };
        match app.key(k) {
            Action::Quit => return Ok(()),
            Action::Load(i) => {
                app.status = "loading…".into();
                terminal.draw(|f| app.draw(f))?;
                app.load(store, i, device);
            }
            Action::Generate => {
                seed += 1;
                app.generate(seed, |a| {
                    let _ = terminal.draw(|f| a.draw(f));
                });
            }
            Action::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;

    type B = burn_ndarray::NdArray<f32>;

    fn press(app: &mut App<B>, code: KeyCode) -> Action {
        app.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn screen(t: &Terminal<TestBackend>) -> String {
        let buf = t.backend().buffer();
        let w = buf.area.width as usize;
        buf.content
            .chunks(w)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn pick_a_model_write_a_prompt_and_see_the_continuation_and_its_speed() {
        // A home with one trained model: the GPT-2-shaped fixture with GPT-2's tokenizer.
        let root = std::env::temp_dir().join(format!("nervus-tui-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let store = Store::new(&root);
        let dir = store.trained("tiny").unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (from, f) in [
            ("models/tests/fixtures/gpt2-bpe", "config.json"),
            ("models/tests/fixtures/gpt2-bpe", "model.safetensors"),
            ("datasets/data/gpt2-tokenizer", "vocab.json"),
            ("datasets/data/gpt2-tokenizer", "merges.txt"),
        ] {
            std::fs::copy(repo.join(from).join(f), dir.join(f)).unwrap();
        }
        let mut app = App::<B>::new(&store);
        assert_eq!(app.models, ["tiny"]);
        let mut term = Terminal::new(TestBackend::new(100, 24)).unwrap();
        term.draw(|f| app.draw(f)).unwrap();
        assert!(screen(&term).contains(">   tiny"), "{}", screen(&term));
        // Enter on the list loads it and moves to the prompt.
        assert_eq!(press(&mut app, KeyCode::Enter), Action::Load(0));
        app.load(&store, 0, &Default::default());
        assert_eq!(app.focus, Focus::Prompt);
        for c in "Hello world".chars() {
            press(&mut app, KeyCode::Char(c));
        }
        // Greedy, 24 tokens: the fixture's reference continuation.
        for _ in 0..8 {
            press(&mut app, KeyCode::F(2));
        }
        assert_eq!(app.temperature, 0.0);
        app.max_tokens = 24;
        assert_eq!(press(&mut app, KeyCode::Enter), Action::Generate);
        let mut redraws = 0;
        app.generate(0, |_| redraws += 1);
        assert!(redraws > 1, "the text streams in ({redraws} redraws)");
        let reference: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(repo.join("models/tests/fixtures/gpt2-bpe/reference.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(app.output, reference["cases"][0]["text"].as_str().unwrap());
        term.draw(|f| app.draw(f)).unwrap();
        let s = screen(&term);
        assert!(s.contains("> ● tiny"), "{s}");
        assert!(s.contains("Hello world propositions"), "{s}");
        assert!(s.contains("temperature 0 (greedy)"), "{s}");
        assert!(s.contains("tokens/s"), "{s}");
        assert_eq!(press(&mut app, KeyCode::Esc), Action::Quit);
        let _ = std::fs::remove_dir_all(&root);
    }
}
