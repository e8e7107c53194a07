package lagmeter

import "testing"

func TestWALLayoutValidate(t *testing.T) {
	for _, tt := range []struct {
		l  WALLayout
		ok bool
	}{
		{WALLayout{}, true},
		{defaultLayout, true},
		{WALLayout{1024, 1 << 20, 4}, true},
		{WALLayout{65536, 1 << 30, 16}, true},
		{WALLayout{8192, 16 << 20, 0}, false},
		{WALLayout{8000, 16 << 20, 8}, false},
		{WALLayout{512, 16 << 20, 8}, false},
		{WALLayout{1 << 17, 1 << 30, 8}, false},
		{WALLayout{8192, 1 << 19, 8}, false},
		{WALLayout{8192, 1<<31 + 0, 8}, false},
		{WALLayout{8192, 16 << 20, 2}, false},
		{WALLayout{BlockSize: 8192}, false},
	} {
		if err := tt.l.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.l, err, tt.ok)
		}
	}
}

func TestRecordEnd(t *testing.T) {
	for _, tt := range []struct {
		l        WALLayout
		in, want string
	}{
		{defaultLayout, "0/3002018", "0/3002000"},          // short header
		{defaultLayout, "0/3000028", "0/3000000"},          // long header, segment start
		{defaultLayout, "0/3000018", "0/3000018"},          // inside a long header: not an insert position, unchanged
		{defaultLayout, "0/3002028", "0/3002028"},          // record tail on an ordinary page
		{defaultLayout, "0/3002030", "0/3002030"},          // mid-page
		{defaultLayout, "0/3002000", "0/3002000"},          // already a boundary
		{defaultLayout, "0/28", "0/28"},                    // segment 0: never 0/0, which means unknown
		{defaultLayout, "0/0", "0/0"},                      // unknown stays unknown
		{defaultLayout, "5/1028", "5/1028"},                // page 0x1000 is mid-page for 8 kB blocks
		{WALLayout{4096, 16 << 20, 8}, "5/1018", "5/1000"}, // ... and a page for 4 kB blocks
		{WALLayout{8192, 1 << 20, 8}, "0/100028", "0/100000"},
		{WALLayout{8192, 16 << 20, 4}, "0/3002014", "0/3002000"},
		{WALLayout{8192, 16 << 20, 4}, "0/3000024", "0/3000000"},
		{WALLayout{8192, 16 << 20, 4}, "0/3002018", "0/3002018"},
		{WALLayout{}, "0/3002018", "0/3002018"},
		{WALLayout{BlockSize: 8192}, "0/3002018", "0/3002018"}, // invalid: as unknown
		{defaultLayout, "FFFFFFFF/FF000028", "FFFFFFFF/FF000000"},
	} {
		if got := tt.l.RecordEnd(mustLSN(t, tt.in)); got.String() != tt.want {
			t.Errorf("%+v.RecordEnd(%s) = %v, want %s", tt.l, tt.in, got, tt.want)
		}
	}
}
