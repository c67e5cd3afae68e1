package output

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type sanitizeCase struct {
	name, in, want string
}

// check runs Sanitize (actor alice) on each case, and again on its output.
func check(t *testing.T, cases []sanitizeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Context{Actor: "alice"}
			got := Sanitize(tc.in, c)
			if got != tc.want {
				t.Errorf("Sanitize(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if again := Sanitize(got, c); again != got {
				t.Errorf("not idempotent: %q -> %q", got, again)
			}
			if problems := invariants(got, "alice"); len(problems) > 0 {
				t.Errorf("output %q: %s", got, strings.Join(problems, "; "))
			}
		})
	}
}

func TestSanitizeMentions(t *testing.T) {
	check(t, []sanitizeCase{
		{"a user", "thanks @bob", "thanks @&#8203;bob"},
		{"a team", "cc @org/everyone", "cc @&#8203;org/everyone"},
		{"a GitLab group", "cc @group/sub/project", "cc @&#8203;group/sub/project"},
		{"everyone", "@all @everyone @here @channel", "@&#8203;all @&#8203;everyone @&#8203;here @&#8203;channel"},
		{"the actor", "@alice: done, @Alice.", "@alice: done, @Alice."},
		{"the actor's team", "@alice/team", "@&#8203;alice/team"},
		{"a longer name", "@alice-bot @alice_ @alice.x", "@&#8203;alice-bot @&#8203;alice_ @&#8203;alice.x"},
		{"an e-mail address", "bob@example.com", "bob@&#8203;example.com"},
		{"escaped", `\@bob`, `\@&#8203;bob`},
		{"entity for @", "&#64;bob &commat;bob &#x40;bob", "&amp;#64;bob &amp;commat;bob &amp;#x40;bob"},
		{"name written with an entity", "@&#98;ob", "@&#8203;&#98;ob"},
		{"the actor's name made longer by an entity", "@alice&#46;x", "@&#8203;alice&#46;x"},
		{"in emphasis", "**@bob**", "**@&#8203;bob**"},
		{"in link text", "[@bob](https://x.y)", "[@&#8203;bob](https://x.y)"},
		{"in a code span", "`@bob` and ``@org/team``", "`@bob` and ``@org/team``"},
		{"in a code block", "```\n@bob\n```", "```\n@bob\n```"},
		{"in a URL", "https://medium.com/@bob/post", "https://medium.com/%40bob/post"},
		{"already neutral", "@&#8203;bob", "@&#8203;bob"},
		{"not a name", "@ 1 @@", "@ 1 @@"},
	})
}

func TestSanitizeHTML(t *testing.T) {
	check(t, []sanitizeCase{
		{"script", "<script>alert(1)</script>", "&lt;script>alert(1)&lt;/script>"},
		{"img", "<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)>"},
		{"iframe", `<iframe src="https://evil"></iframe>`, `&lt;iframe src="https:&#8203;//evil">&lt;/iframe>`},
		{"a", `<a href="javascript:x">y</a>`, `&lt;a href="javascript:&#8203;x">y&lt;/a>`},
		{"comment", "<!-- hidden @bob -->", "&lt;!-- hidden @&#8203;bob -->"},
		{"allowed tag with an attribute", `<details open><b class="x">y</b>`, `&lt;details open>&lt;b class="x">y</b>`},
		{"allowed tags", "<b>x</b> <kbd>Ctrl</kbd>+<kbd>C</kbd> H<sub>2</sub>O<br/>", "<b>x</b> <kbd>Ctrl</kbd>+<kbd>C</kbd> H<sub>2</sub>O<br/>"},
		{"pre is not allowed", "<pre>x</pre>", "&lt;pre>x&lt;/pre>"},
		{"escaped <", `\<script>`, "&lt;script>"},
		{"a plain <", "a < b", "a &lt; b"},
		{"entity for a control character", "&#27; &#x202E; &#128; &#0;", "&amp;#27; &amp;#x202E; &amp;#128; &#0;"},
		{"entities that stay", "&lt;b&gt; &amp; &nbsp; &copy; &#124;", "&lt;b&gt; &amp; &nbsp; &copy; &#124;"},
		{"in code", "`<script>` and\n```html\n<img src=x onerror=alert(1)>\n```", "`<script>` and\n```html\n<img src=x onerror=alert(1)>\n```"},
	})
}

func TestSanitizeLinks(t *testing.T) {
	check(t, []sanitizeCase{
		{"javascript", "[x](javascript:alert(1))", "x `javascript:alert(1)`"},
		{"mixed case, percent-encoded colon", "[x](JaVaScRiPt%3Aalert(1))", "x `JaVaScRiPt%3Aalert(1)`"},
		{"percent-encoded letter", "[x](%6Aavascript:alert(1))", "x `%6Aavascript:alert(1)`"},
		{"double percent-encoding", "[x](javascript%253Aalert(1))", "x `javascript%253Aalert(1)`"},
		{"entity", "[x](&#106;avascript:alert(1))", "x `&#106;avascript:alert(1)`"},
		{"named entity colon", "[x](javascript&colon;alert(1))", "x `javascript&colon;alert(1)`"},
		{"escaped colon", `[x](javascript\:alert(1))`, "x `javascript\\:alert(1)`"},
		{"blank inside", "[x](<java script:alert(1)>)", "x `java script:alert(1)`"},
		{"data", "[x](data:text/html;base64,PHNjcmlwdD4=)", "x `data:text/html;base64,PHNjcmlwdD4=`"},
		{"vbscript", "[x](vbscript:msgbox)", "x `vbscript:msgbox`"},
		{"file", "[x](file:///etc/passwd)", "x `file:///etc/passwd`"},
		{"ws", "[x](ws://evil/s)", "x `ws://evil/s`"},
		{"smb", "[x](smb://evil/share)", "x `smb://evil/share`"},
		{"ftp", "[x](ftp://h/f)", "x `ftp://h/f`"},
		{"mailto", "[x](mailto:a@b.c)", "x `mailto:a@b.c`"},
		{"protocol-relative", "[x](//evil.com/p)", "x `//evil.com/p`"},
		{"backslashes", `[x](/\evil.com)`, "x `/\\evil.com`"},
		{"unknown scheme", "[x](foo:bar)", "x `foo:bar`"},
		{"image", "![logo](data:image/png;base64,AAA)", "logo `data:image/png;base64,AAA`"},
		{"image with an event handler in its target", `![x](https://a.b/x.png"onerror="alert(1))`, "x `https://a.b/x.png\"onerror=\"alert(1)`"},
		{"reference definition", "[ref]: javascript:alert(1)\n\n[click][ref]", "\\[ref\\]: `javascript:alert(1)`\n\n[click][ref]"},
		{"autolink", "<javascript:alert(1)> <smb://h/s> <mailto:a@b.c> <a@b.c>", "`javascript:alert(1)` `smb://h/s` `mailto:a@b.c` `a@b.c`"},
		{"bare", "ws://h smb://h/s data:text/html,x mailto:a@b.c xmpp:a@b.c javascript:alert(1)",
			"ws:&#8203;//h smb:&#8203;//h/s data:&#8203;text/html,x mailto:&#8203;a@&#8203;b.c xmpp:&#8203;a@&#8203;b.c javascript:&#8203;alert(1)"},
		{"bare with an entity in its scheme", "&#106;https://x.y", "&#106;https:&#8203;//x.y"},
		{"https", "[x](https://example.com/a_(b)?q=1#f) <https://example.com> https://example.com/x www.example.com",
			"[x](https://example.com/a_(b)?q=1#f) <https://example.com> https://example.com/x www.example.com"},
		{"http with a title", `[x](http://example.com "the site")`, `[x](http://example.com "the site")`},
		{"odd title dropped", `[x](http://example.com "a \"b\"")`, `[x](http://example.com)`},
		{"relative", "[a](docs/a.md) [b](../b.md#c) [c](#frag) [d](?q=1) [e](/abs/path) [f]()", "[a](docs/a.md) [b](../b.md#c) [c](#frag) [d](?q=1) [e](/abs/path) [f]()"},
		{"relative in <>", "[a](<docs/a.md>)", "[a](docs/a.md)"},
		{"reference", "[text][ref] and [ref]\n\n[ref]: https://example.com", "[text][ref] and [ref]\n\n[ref]: https://example.com"},
		{"task list", "- [ ] todo\n- [x] done", "- [ ] todo\n- [x] done"},
		{"bare https running into code", "https://x.y/`a` @bob `b`", "https:&#8203;//x.y/`a` @&#8203;bob `b`"},
		{"nested link", "[a [b](https://x) c](https://y)", "\\[a [b](https://x) c\\](https://y)"},
		{"a link in a dropped link", "[![i](https://x/i.png)](javascript:x)", "![i](https://x/i.png) `javascript:x`"},
		{"a target that does not end on its line", "[x](\njavascript:alert(1))", "\\[x\\](\njavascript:&#8203;alert(1))"},
		{"a text that does not end on its line", "[click\nme](javascript:alert(1))", "\\[click\nme](javascript:&#8203;alert(1))"},
		{"a definition on two lines", "[a]:\njavascript:alert(1)", "\\[a\\]:\njavascript:&#8203;alert(1)"},
	})
}

func TestSanitizeQuickActions(t *testing.T) {
	check(t, []sanitizeCase{
		{"merge", "/merge", `\/merge`},
		{"approve", "LGTM\n/approve", "LGTM\n\\/approve"},
		{"leading spaces and tabs", "  /close\n\t/label ~x", "  \\/close\n\t\\/label ~x"},
		{"in a list or quote", "- /close\n> /merge", "- /close\n> /merge"},
		{"in a fenced block", "```\n/merge\n  /approve\n```", "```\n /merge\n  /approve\n```"},
		{"in a tilde block", "~~~\n/merge\n~~~", "~~~\n /merge\n~~~"},
		{"in an indented block", "text\n\n    /merge\n    x", "text\n\n```\n /merge\nx\n```"},
		{"in an indented fence", "  ```\n  /merge\n  ```", "```\n /merge\n  ```"},
		{"made by a dropped link", "[/merge](javascript:x)", "\\/merge `javascript:x`"},
		{"in an HTML block", "<details>\n/merge\n</details>", "<details>\n&#47;merge\n</details>"},
		{"in code, kept", "`/merge` is a quick action", "`/merge` is a quick action"},
	})
}

func TestSanitizeCode(t *testing.T) {
	check(t, []sanitizeCase{
		{"code spans kept", "a `<b> @x [y](javascript:z)` b ``x ` y``", "a `<b> @x [y](javascript:z)` b ``x ` y``"},
		{"unpaired backticks escaped", "a ` b `` c", "a \\` b \\`\\` c"},
		{"a code span does not span lines", "`a\n@bob`", "\\`a\n@&#8203;bob\\`"},
		{"fenced block kept", "```js\nlet a = '<img src=x>'; // @bob\n```", "```js\nlet a = '<img src=x>'; // @bob\n```"},
		{"fence moved to the margin", "   ```\n   @bob\n     x\n   ```", "```\n@bob\n  x\n   ```"},
		{"unclosed fence closed", "```\n@bob\n", "```\n@bob\n```\n"},
		{"a fence in a container cannot open", "> ```\n> @bob", "> \\`\\`\\`\n> @&#8203;bob"},
		{"a tilde fence in a list cannot open", "- ~~~\n  @bob", "- \\~~~\n  @&#8203;bob"},
		{"indented code", "text\n\n    <img src=x>\n    @bob\n\n    more\n\nafter", "text\n\n```\n<img src=x>\n@bob\n\nmore\n```\n\nafter"},
		{"indented list paragraph is not code", "- a\n\n    @bob", "- a\n\n    @&#8203;bob"},
		{"indented line in a paragraph is not code", "a\n    @bob", "a\n    @&#8203;bob"},
	})
}

func TestSanitizeHTMLBlocks(t *testing.T) {
	check(t, []sanitizeCase{
		{"details", "<details>\n<summary>Logs @bob</summary>\n\n```\nlog @bob\n```\n\n</details>",
			"<details>\n<summary>Logs @&#8203;bob</summary>\n\n```\nlog @bob\n```\n\n</details>"},
		{"backticks in an HTML block are text", "<details>\n`@bob` `<img src=x>`\n\nafter `@bob`",
			"<details>\n`@&#8203;bob` `&lt;img src=x>`\n\nafter `@bob`"},
		{"no fence in an HTML block", "<p>\n```\n@bob", "<p>\n&#96;&#96;&#96;\n@&#8203;bob"},
		{"an https autolink in an HTML block is shown", "<ul>\n<li><https://x.y></li>", "<ul>\n<li>`https://x.y`</li>"},
		{"in a list item", "- <details>\n  `@bob`", "- <details>\n  `@&#8203;bob`"},
		{"an inline tag alone", "<b>\n`@bob`", "<b>\n`@&#8203;bob`"},
		{"an inline tag with text is no block", "<b>x</b> `@bob`", "<b>x</b> `@bob`"},
		{"escapes read as HTML", "<details>\n\\&#64;bob [x", "<details>\n\\&amp;#64;bob &#91;x"},
	})
}

func TestSanitizeTables(t *testing.T) {
	check(t, []sanitizeCase{
		{"a code span across cells", "| a | b |\n|---|---|\n| `x | @bob | y` | z |", "| a | b |\n|---|---|\n| \\`x | @&#8203;bob | y\\` | z |"},
		{"an escaped pipe in a code span", "| a |\n|---|\n| `x \\| y` |", "| a |\n|---|\n| `x \\| y` |"},
		{"a link across cells", "| [a | b](javascript:x) |\n|---|", "| \\[a | b](javascript:&#8203;x) |\n|---|"},
		{"no table", "`a | b`", "`a | b`"},
	})
}

func TestSanitizeCleans(t *testing.T) {
	check(t, []sanitizeCase{
		{"control and format characters", "a\x00b\x1b[0m\u202Ec\u200Bd\r\ne\rf", "ab\\[0mcd\nef"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"empty", "", ""},
	})
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden.md")

// TestSanitizeGolden shows what Sanitize makes of a hostile text and of an
// ordinary one (testdata/*.md; go test -update rewrites the golden files).
func TestSanitizeGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.md"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.md") {
			continue
		}
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := Sanitize(string(data), Context{Actor: "alice"})
			golden := strings.TrimSuffix(in, ".md") + ".golden.md"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("Sanitize(%s) differs from %s:\n%s", in, golden, got)
			}
			if problems := invariants(got, "alice"); len(problems) > 0 {
				t.Errorf("%s", strings.Join(problems, "\n"))
			}
		})
	}
}
