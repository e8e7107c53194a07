package pgrouted

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// DriverName is the name pgrouted registers with database/sql.
const DriverName = "pgrouted"

func init() {
	sql.Register(DriverName, &Driver{})
}

// Driver is the database/sql driver registered as "pgrouted". Use it
// through sql.Open("pgrouted", dsn); for hooks a DSN cannot carry, build a
// [Connector] with [NewConnector] and sql.OpenDB.
type Driver struct{}

// Open implements driver.Driver. database/sql uses OpenConnector instead;
// Open starts a new Connector (probers and pools) for the one connection
// it returns, and closes it with that connection.
func (d *Driver) Open(name string) (driver.Conn, error) {
	c, err := d.OpenConnector(name)
	if err != nil {
		return nil, err
	}
	cn, err := c.Connect(context.Background())
	if err != nil {
		c.(*Connector).Close()
		return nil, err
	}
	cn.(*conn).ownsConnector = true
	return cn, nil
}

// OpenConnector implements driver.DriverContext: it parses the DSN and
// starts the topology probers; database/sql closes the Connector when the
// *sql.DB is closed.
func (d *Driver) OpenConnector(name string) (driver.Connector, error) {
	cfg, err := ParseConfig(name)
	if err != nil {
		return nil, err
	}
	return NewConnector(cfg)
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.DriverContext = (*Driver)(nil)
)
