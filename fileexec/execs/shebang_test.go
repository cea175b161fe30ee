package execs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shebangCases are #! lines and what the kernel makes of them (checked
// against the running kernel by TestShebangAgainstKernel, where "@" is
// the interpreter's path).
var shebangCases = []struct {
	name string
	head string
	want shebang
	ok   bool
}{
	{name: "plain", head: "#!@\necho hi\n", want: shebang{name: "@"}, ok: true},
	{name: "argument", head: "#!@ -e\n", want: shebang{name: "@", arg: "-e", hasArg: true}, ok: true},
	{name: "spaces around", head: "#! \t @ \t -x \t \n", want: shebang{name: "@", arg: "-x", hasArg: true}, ok: true},
	{name: "one argument with spaces", head: "#!@ a b  c\n", want: shebang{name: "@", arg: "a b  c", hasArg: true}, ok: true},
	{name: "trailing spaces only", head: "#!@   \n", want: shebang{name: "@"}, ok: true},
	{name: "carriage return is part of the name", head: "#!@\r\n", want: shebang{name: "@\r"}, ok: true},
	{name: "carriage return is the argument", head: "#!@ \r\n", want: shebang{name: "@", arg: "\r", hasArg: true}, ok: true},
	{name: "no newline, short file", head: "#!@", want: shebang{name: "@"}, ok: true},
	{name: "no newline, with argument", head: "#!@ x", want: shebang{name: "@", arg: "x", hasArg: true}, ok: true},
	{name: "NUL ends the name", head: "#!@\x00junk\n", want: shebang{name: "@"}, ok: true},
	{name: "NUL inside the argument", head: "#!@ ab\x00cd\n", want: shebang{name: "@", arg: "ab", hasArg: true}, ok: true},
	{name: "NUL before the newline", head: "#!@ a\x00\n", want: shebang{name: "@", arg: "a", hasArg: true}, ok: true},
	{name: "argument cut at the buffer's end", head: "#!@ " + strings.Repeat("a", 400) + "\n", want: shebang{name: "@", arg: strings.Repeat("a", binprmBufSize-len("#!@ ")-1), hasArg: true}, ok: true},
	{name: "only spaces", head: "#!   \n", ok: false},
	{name: "empty", head: "#!\n", ok: false},
	{name: "not a script", head: "\x7fELF", ok: false},
	{name: "one byte", head: "#", ok: false},
	{name: "space before the bang", head: "# !@\n", ok: false},
	{name: "name longer than the buffer", head: "#!/" + strings.Repeat("d", 300), ok: false},
	{name: "all spaces to the buffer's end", head: "#!" + strings.Repeat(" ", 300), ok: false},
}

func TestParseShebang(t *testing.T) {
	for _, tt := range shebangCases {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseShebang([]byte(tt.head))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(shebang{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestScriptArgv(t *testing.T) {
	tests := []struct {
		name string
		sb   shebang
		argv []string
		want []string
	}{
		{name: "plain", sb: shebang{name: "/bin/sh"}, argv: []string{"./s", "a"}, want: []string{"/bin/sh", "/w/s", "a"}},
		{name: "argument", sb: shebang{name: "/usr/bin/env", arg: "python3 -u", hasArg: true}, argv: []string{"s"}, want: []string{"/usr/bin/env", "python3 -u", "/w/s"}},
		{name: "empty argv", sb: shebang{name: "/bin/sh"}, want: []string{"/bin/sh", "/w/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, scriptArgv(tt.sb, "/w/s", tt.argv)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseShebang checks what holds of every line the kernel accepts:
// the name holds no space, tab, NUL or newline (it is empty only when
// nothing but spaces and tabs come between "#!" and a NUL, which the
// kernel takes as a script too, whose interpreter it then fails to open);
// the
// argument holds no NUL or newline and starts with neither space nor tab,
// nor ends with one when the line has its newline; both lie within the first line of the buffer. The kernel
// itself is the reference in FuzzShebangAgainstKernel.
func FuzzParseShebang(f *testing.F) {
	for _, c := range shebangCases {
		f.Add([]byte(c.head))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		sb, ok := parseShebang(head)
		if !ok {
			if sb != (shebang{}) {
				t.Fatalf("not a script, but %+v", sb)
			}
			return
		}
		if len(head) < 2 || head[0] != '#' || head[1] != '!' {
			t.Fatalf("%q is no #! line, parsed as %+v", head, sb)
		}
		rest, _, _ := strings.Cut(string(head[2:min(len(head), binprmBufSize)]), "\x00")
		if sb.name == "" && strings.Trim(rest, " \t") != "" || strings.ContainsAny(sb.name, " \t\x00\n") {
			t.Fatalf("name %q", sb.name)
		}
		// Without a newline the kernel trims nothing at the end (it looks
		// at the buffer's last byte, a NUL for a short file).
		newline := strings.Contains(rest, "\n")
		if strings.ContainsAny(sb.arg, "\x00\n") || sb.arg != "" && (spacetab(sb.arg[0]) || newline && spacetab(sb.arg[len(sb.arg)-1])) {
			t.Fatalf("argument %q", sb.arg)
		}
		if !sb.hasArg && sb.arg != "" {
			t.Fatalf("argument %q without hasArg", sb.arg)
		}
		line := string(head[:min(len(head), binprmBufSize)])
		if !strings.Contains(line, sb.name) || !strings.Contains(line, sb.arg) {
			t.Fatalf("%+v is not in %q", sb, line)
		}
	})
}
