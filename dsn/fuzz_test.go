package dsn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// FuzzParse is seeded with every DSN of the table (and testdata/fuzz). For
// any input it checks that Parse does not panic, returns a *ParseError,
// agrees with pgx on what parses and what each host connects to, formats
// to a string that parses back to an equal Config (also after routing
// settings are changed in code), and never shows a
// password: the input's own, and the marker put in each password position
// in front of the input, in the error's text and anywhere in its chain
// (checkChain).
func FuzzParse(f *testing.F) {
	isolateEnv(f, nil)
	for _, tc := range cases {
		f.Add(tc.dsn)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if readsDevice(s) {
			t.Skip("names a device file; pgx would read it")
		}
		cfg, err := Parse(s)
		whole, pgxErr := pgx.ParseConfig(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError: %v", err, err)
			}
			if pgxErr == nil && len(whole.Password) >= minSecret &&
				(strings.Contains(err.Error(), whole.Password) || strings.Contains(pe.Key, whole.Password)) {
				t.Fatalf("error shows the password %q: %v", whole.Password, err)
			}
		} else {
			if pgxErr != nil {
				t.Fatalf("Parse accepts what pgx rejects (%v)", pgxErr)
			}
			if diff := diffPgx(s, cfg); diff != "" {
				t.Fatalf("hosts differ from pgx's parse: %s", diff)
			}
			formatted := Format(cfg)
			back, err := Parse(formatted)
			if err != nil {
				t.Fatalf("Parse(Format) = %v\nformatted: %q", err, formatted)
			}
			if diff := diffConfig(cfg, back); diff != "" {
				t.Fatalf("Format→Parse differs: %s\nformatted: %q", diff, formatted)
			}

			// Changed in code: Format appends the changed keys to the
			// string as given, and they must win when it is parsed again.
			changed := cfg.Clone()
			changed.StrictBoot = !changed.StrictBoot
			changed.SelectPolicy = SelectNearest
			changed.Hosts[0].Name = "fz 0"
			if changed.Validate() == nil {
				formatted := Format(changed)
				back, err := Parse(formatted)
				if err != nil {
					t.Fatalf("Parse(Format) of a changed Config = %v\nformatted: %q", err, formatted)
				}
				if diff := diffConfig(changed, back); diff != "" {
					t.Fatalf("Format→Parse of a changed Config differs: %s\nformatted: %q", diff, formatted)
				}
				// The mask itself may read like the password (password=x
				// in password=xxxxx): look for it outside the masks.
				if p := whole.Password; len(p) >= minSecret && strings.Contains(strings.ReplaceAll(changed.Redacted(), mask, "\x00"), p) {
					t.Fatalf("Redacted shows the password %q: %q", p, changed.Redacted())
				}
			}
		}

		// The marker in each password position, then the input; the input
		// loses any marker of its own, so that the marker is nothing but a
		// password.
		rest := strings.ReplaceAll(s, marker, "pw")
		if strings.Contains(rest, marker) {
			return
		}
		for _, v := range []string{
			"password=" + marker + " " + rest,
			"password='" + marker + ` \' x' ` + rest,
			"postgres://u:" + marker + "@" + rest,
			"postgres://u:" + marker + "%40%2F%3A@" + rest,
			"postgres://db/x?password=" + marker + "&" + rest,
			"host=db1 sslpassword=" + marker + " " + rest,
		} {
			cfg, err := Parse(v)
			if err != nil {
				var pe *ParseError
				if errors.As(err, &pe) && strings.Contains(pe.Key, marker) || strings.Contains(err.Error(), marker) {
					t.Fatalf("Parse(%q): error shows the password: %v", v, err)
				}
				// Nor its chain: pgx's error is a copy with the
				// connection string masked.
				checkChain(t, err, marker)
				continue
			}
			for _, text := range []string{cfg.String(), cfg.Redacted(), fmt.Sprintf("%v %+v %#v", cfg, *cfg, *cfg)} {
				if strings.Contains(text, marker) {
					t.Fatalf("Parse(%q): %q shows the password", v, text)
				}
			}
		}
	})
}

// readsDevice reports whether s may name a device or kernel file, which a
// file key (sslrootcert, passfile, servicefile, ...) would make pgx read,
// perhaps forever.
func readsDevice(s string) bool {
	raw := strings.ReplaceAll(s, `\`, "")
	// Percent-decode what can be, leaving malformed escapes as they are.
	var n strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && i+2 < len(raw) {
			if v, err := strconv.ParseUint(raw[i+1:i+3], 16, 8); err == nil {
				n.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		n.WriteByte(raw[i])
	}
	d := n.String()
	return strings.Contains(d, "/dev") || strings.Contains(d, "/proc") || strings.Contains(d, "/sys")
}
