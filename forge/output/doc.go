// Package output validates what a forge job wrote to /job/out before the
// host posts any of it: comment.md (a comment), review.json (replies to
// review comments and inline comments) and labels.json (labels to add and
// remove). Nothing the agent writes is ever executed or posted unvalidated.
//
// A file is refused as a whole, with one line naming the file and the rule
// (a *Refusal, which wraps jobs.ErrBadOutput); then nothing of it is
// posted. Neutralising (Sanitize) is not refusing: the text is posted, made
// inert.
//
// # Refused
//
//   - text that is not UTF-8, or holds a control character other than
//     newline and tab (CRLF line ends are folded to LF), or a format
//     character (zero-width characters, bidi controls, U+2028, U+2029);
//   - a file over its byte limit (Limits; checked before anything else is
//     read), too many review items or labels, a review item with an empty
//     body, a text longer than MaxPostBytes once neutralised;
//   - review.json and labels.json that are not exactly one JSON object with
//     the known keys, each once and spelled exactly, each value of its type;
//     a reply to a comment that is not one of the job's review comments; an
//     inline comment on a path or line outside the pull request's diff (or
//     any when the job has no diff); a label that is not in the trigger's
//     publish.labels allow-list (exact, case-sensitive), or named twice.
//
// # Neutralised
//
// Sanitize applies these rules to every text the parsers answer, and the
// host applies it to a pull request's body. Each is an allow-list: what it
// does not know is made inert.
//
//  1. Mentions: an @ followed by a name (@user, @org/team, GitLab's
//     @group/sub, @all, @everyone, @here, an e-mail address) gets a
//     zero-width space after it, written as the entity &#8203;, unless it
//     mentions Context.Actor (compared without case, after a blank, a
//     bracket, a quote, a backtick or , ; :; @all, @everyone, @here and
//     @channel never count as the actor). No forge reads "@&#8203;name" as
//     a mention (Renovate writes its release notes so); unlike a code
//     span it also holds inside an HTML block, and the reader still sees
//     @name. Within an allowed bare URL the @ is written %40. A name
//     written with entities or escapes is read as a forge reads it, and an
//     entity for @ or : is escaped (it shows as written).
//  2. HTML: every < outside code becomes &lt;, except an allowed tag
//     written with no attribute: <b> <i> <em> <strong> <code> <kbd> <sub>
//     <sup> <del> <s> <br> (<br/>, <br />) <details> <summary> <p> <ul>
//     <ol> <li> and their closing tags. A comment, <script>, <img>,
//     <iframe>, <a>, <pre> or any tag with an attribute never passes. An
//     entity for a control or format character is escaped too.
//  3. Links: a target is kept only when, after backslash-unescaping,
//     repeated HTML-entity and percent decoding, removing whitespace,
//     control and format characters, turning \ into / and lower-casing, its
//     scheme is http or https, or it has none (a relative path, query or
//     fragment). A target that starts with // (another host, with the
//     page's scheme) counts as having a scheme. A target is also dropped
//     when it is written with characters outside the URL set (blanks,
//     quotes, backslashes, backticks, angle brackets) or holds a nested
//     scheme:// of another scheme. A dropped inline link or image becomes
//     its text followed by its target in a code span
//     ("x `javascript:alert(1)`"): nothing is hidden and nothing is
//     clickable. A reference definition with a dropped target is escaped
//     so it defines nothing; an autolink <...> that is not http(s)
//     (mailto: included) becomes a code span. A bare scheme: outside code
//     whose scheme is not http or https gets &#8203; after its colon when a
//     letter, a digit or a / follows, so no forge links it; a bare http(s)
//     URL or www. that would run into a backtick, a bracket, an escape or
//     an entity is broken the same way.
//  4. Quick actions: GitLab runs a line that starts with / as a command of
//     the bot (/merge, /approve, /close, /label ...). On every forge, a line
//     whose first non-blank character is / is escaped (\/, or &#47; where
//     the line may sit in an HTML block), and a line of a code block that
//     starts with / is indented by one space (GitLab reads a command only
//     at the very start of a line). Nothing an output holds can merge,
//     approve, close or relabel.
//  5. Code: code spans and fenced code blocks are kept as written (a fence
//     opened with up to three spaces of indentation moves to the start of
//     its line, and its lines keep how they render); an indented code
//     block after a blank line, outside a list, becomes a fenced one with
//     the same content; a fence left open is closed at the end.
//
// # How
//
// Sanitize reads the text line by line and shapes its output so that every
// construct is decided on its own line, as any CommonMark or GFM parser
// reads it: a backtick run or a [ that does not pair on its line is
// escaped, a link whose target does not end on its line is unpaired, a ~~~
// that a container could open as a fence is escaped, and a line that may
// be a table's row is read cell by cell. A line that may sit in an HTML
// block (it starts, after any >, list marker or indentation, with an
// allowed block tag, or holds an allowed tag alone) is read both ways: what
// its backticks hold is neutralised too, and its escapes are entities.
// Sanitize is idempotent: Sanitize(Sanitize(x)) == Sanitize(x).
package output
