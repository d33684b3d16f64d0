package cli

import (
	"bytes"
	"testing"
)

// Text stored by others (a token's name, a policy version's comment, a
// reason) cannot act on the terminal of whoever lists it, nor break the
// table: control characters and invalid bytes are shown escaped; other
// text, accents and all, as it is.
func TestTablesShowControlCharactersEscaped(t *testing.T) {
	var b bytes.Buffer
	tab := newTable(&b, "NAME", "COMMENT")
	tab.row("evil\x1b[31mred", "two\nlines\tand a tab")
	tab.row("café", "bad \xff byte")
	if err := tab.flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME             COMMENT\n" +
		`evil\x1b[31mred  two\nlines\tand a tab` + "\n" +
		`café             bad \xff byte` + "\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
