//! robots.txt, as RFC 9309 describes it: groups of `User-agent` lines followed by `Allow` and
//! `Disallow` rules. The crawler obeys the groups that name it ([`AGENT`], case-insensitively),
//! and only when none does, the `*` groups. Of the rules whose path pattern matches a page, the
//! longest wins, and on a tie `Allow` does (the least restrictive, as the RFC says). Patterns
//! match from the start of the path (with its query), `*` matches any run of characters and a
//! final `$` anchors the end. An empty `Disallow` allows everything. `Crawl-delay`, which the RFC
//! leaves out but many sites write, is read and honoured when it is longer than the crawl's own.

/// The product token the crawler answers to.
pub const AGENT: &str = "nervus";

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub allow: bool,
    pub pattern: String,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.allow { "Allow" } else { "Disallow" };
        write!(f, "{verb}: {}", self.pattern)
    }
}

/// The rules that apply to this crawler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Robots {
    pub rules: Vec<Rule>,
    /// Seconds, from `Crawl-delay`.
    pub crawl_delay: Option<f64>,
}

#[derive(Default)]
struct Group {
    agents: Vec<String>,
    rules: Vec<Rule>,
    crawl_delay: Option<f64>,
}

impl Robots {
    /// Everything allowed: what a missing robots.txt (a 4xx answer) means.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Nothing allowed: what an unreachable robots.txt (a 5xx answer, or no answer) means, since
    /// the site may be saying no and we cannot hear it.
    pub fn disallow_all() -> Self {
        Self {
            rules: vec![Rule {
                allow: false,
                pattern: "/".into(),
            }],
            crawl_delay: None,
        }
    }

    /// The rules of `text` for the crawler called `agent`.
    pub fn parse(text: &str, agent: &str) -> Self {
        let mut groups: Vec<Group> = Vec::new();
        let mut current = Group::default();
        // Whether the current group has had a rule yet: a `User-agent` line after one starts a
        // new group, before one it adds to the group's agents.
        let mut in_rules = false;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim().to_ascii_lowercase().as_str() {
                "user-agent" => {
                    if in_rules {
                        groups.push(std::mem::take(&mut current));
                        in_rules = false;
                    }
                    current.agents.push(value.to_ascii_lowercase());
                }
                k @ ("allow" | "disallow") => {
                    in_rules = true;
                    if !value.is_empty() {
                        current.rules.push(Rule {
                            allow: k == "allow",
                            pattern: value.to_string(),
                        });
                    }
                }
                "crawl-delay" => {
                    in_rules = true;
                    current.crawl_delay = value.parse().ok().filter(|d: &f64| d.is_finite());
                }
                _ => {}
            }
        }
        groups.push(current);
        let agent = agent.to_ascii_lowercase();
        // A `User-agent` value names a product; `nervus/0.1` is still `nervus`.
        let names_us = |g: &Group| {
            g.agents
                .iter()
                .any(|a| a.split('/').next().unwrap_or("").trim() == agent)
        };
        let ours: Vec<&Group> = groups.iter().filter(|g| names_us(g)).collect();
        let chosen = if ours.is_empty() {
            groups
                .iter()
                .filter(|g| g.agents.iter().any(|a| a == "*"))
                .collect()
        } else {
            ours
        };
        Robots {
            rules: chosen.iter().flat_map(|g| g.rules.clone()).collect(),
            crawl_delay: chosen.iter().filter_map(|g| g.crawl_delay).reduce(f64::max),
        }
    }

    /// The rule that decides `path` (path and query), or `None` when no rule matches and the path
    /// is allowed.
    pub fn deciding_rule(&self, path: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .filter(|r| matches(&r.pattern, path))
            .max_by(|a, b| {
                a.pattern
                    .len()
                    .cmp(&b.pattern.len())
                    .then(a.allow.cmp(&b.allow))
            })
    }

    pub fn allowed(&self, path: &str) -> bool {
        self.deciding_rule(path).is_none_or(|r| r.allow)
    }
}

/// Whether `pattern` matches the start of `path` (all of it with a final `$`). Wildcards are
/// matched greedily with backtracking to the last `*` only, which is quadratic at worst in the
/// lengths of two short strings and never exponential.
pub fn matches(pattern: &str, path: &str) -> bool {
    let (pattern, anchored) = match pattern.strip_suffix('$') {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    let p = pattern.as_bytes();
    let t = path.as_bytes();
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if i == p.len() && (!anchored || j == t.len()) {
            return true;
        }
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && j < t.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star
            && sj < t.len()
        {
            // Let the last `*` swallow one more character and try again from there.
            star = Some((si, sj + 1));
            i = si + 1;
            j = sj + 1;
        } else {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: &str = "\
# comment
User-agent: *
Disallow: /book/private/
Allow: /book/private/open.html
Disallow: /*.pdf$

User-agent: otherbot
User-agent: thirdbot
Disallow: /
";

    #[test]
    fn star_group_longest_match_wins() {
        let r = Robots::parse(SITE, AGENT);
        assert!(r.allowed("/book/ch01.html"));
        assert!(!r.allowed("/book/private/secret.html"));
        assert!(
            r.allowed("/book/private/open.html"),
            "the longer Allow wins"
        );
        assert_eq!(
            r.deciding_rule("/book/private/x").map(ToString::to_string),
            Some("Disallow: /book/private/".into())
        );
        assert!(!r.allowed("/files/a.pdf"));
        assert!(r.allowed("/files/a.pdf?x=1"), "$ anchors the end");
        let other = Robots::parse(SITE, "thirdbot");
        assert!(
            !other.allowed("/book/ch01.html"),
            "a group may name several agents"
        );
    }

    #[test]
    fn a_group_naming_us_replaces_the_star_group() {
        let text = "User-agent: *\nDisallow: /\n\nUser-agent: Nervus/0.1\nDisallow: /tmp\n\
                    Crawl-delay: 2.5\n";
        let r = Robots::parse(text, AGENT);
        assert!(r.allowed("/book/"));
        assert!(!r.allowed("/tmp/x"));
        assert_eq!(r.crawl_delay, Some(2.5));
    }

    #[test]
    fn ties_go_to_allow_and_empty_disallow_allows() {
        let r = Robots::parse("User-agent: *\nDisallow: /a\nAllow: /a\n", AGENT);
        assert!(r.allowed("/a/b"));
        let r = Robots::parse("User-agent: *\nDisallow:\n", AGENT);
        assert!(r.allowed("/anything"));
        assert!(Robots::allow_all().allowed("/x"));
        assert!(!Robots::disallow_all().allowed("/x"));
        assert!(Robots::parse("", AGENT).allowed("/x"));
    }

    #[test]
    fn wildcards() {
        assert!(matches("/", "/x"));
        assert!(matches("/a*c", "/abbbc/d"));
        assert!(matches("/a*c$", "/abc"));
        assert!(!matches("/a*c$", "/abcd"));
        assert!(matches("*", ""));
        assert!(!matches("/b", "/a"));
        assert!(matches("/*/*/*x", "/a/b/c/dx"));
        let long = "/".to_string() + &"a".repeat(5000);
        assert!(!matches("/*a*a*a*b", &long), "no blow-up on a near miss");
    }
}
