-- The example database served as db://app by examples/mcp-resources.toml.
--
-- examples/app.db is generated from this file and committed, so the quick start needs no
-- sqlite3. After editing this file, regenerate it with either of:
--
--   rm -f examples/app.db && sqlite3 examples/app.db < examples/app.sql
--   MCPR_REGENERATE_EXAMPLE_DB=1 cargo test -p mcp-resources --test example_db
--
-- and commit both; `cargo test -p mcp-resources --test example_db` fails while they differ.

CREATE TABLE users (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL UNIQUE,
    status     TEXT NOT NULL CHECK (status IN ('active', 'invited', 'suspended')),
    created_at TEXT NOT NULL
);

CREATE TABLE orders (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id),
    product     TEXT NOT NULL,
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    total_cents INTEGER NOT NULL,
    placed_at   TEXT NOT NULL
);

CREATE INDEX orders_by_user ON orders (user_id);

-- A view has a schema and rows like a table: db://app/tables/order_totals.
CREATE VIEW order_totals AS
    SELECT u.id AS user_id, u.name, count(o.id) AS orders, coalesce(sum(o.total_cents), 0) AS total_cents
    FROM users u LEFT JOIN orders o ON o.user_id = u.id
    GROUP BY u.id, u.name;

INSERT INTO users (id, name, email, status, created_at) VALUES
    (1, 'Ada Lovelace',     'ada@example.com',     'active',    '2024-01-15T09:00:00Z'),
    (2, 'Grace Hopper',     'grace@example.com',   'active',    '2024-02-03T14:30:00Z'),
    (3, 'Linus Torvalds',   'linus@example.com',   'suspended', '2024-02-20T08:15:00Z'),
    (4, 'Margaret Hamilton','margaret@example.com','active',    '2024-03-11T11:45:00Z'),
    (5, 'Alan Turing',      'alan@example.com',    'invited',   '2024-04-02T16:00:00Z'),
    (6, 'Barbara Liskov',   'barbara@example.com', 'active',    '2024-04-28T10:20:00Z'),
    (7, 'Edsger Dijkstra',  'edsger@example.com',  'invited',   '2024-05-09T13:05:00Z'),
    (8, 'Frances Allen',    'frances@example.com', 'suspended', '2024-06-01T07:50:00Z');

INSERT INTO orders (id, user_id, product, quantity, total_cents, placed_at) VALUES
    (1001, 1, 'Analytical Engine manual', 1,  4900, '2024-02-01T10:00:00Z'),
    (1002, 1, 'Punched cards (box)',      3,  2700, '2024-02-14T12:30:00Z'),
    (1003, 2, 'COBOL pocket guide',       2,  3800, '2024-03-02T09:10:00Z'),
    (1004, 2, 'Nanosecond wire',          10, 1500, '2024-03-05T15:45:00Z'),
    (1005, 4, 'Apollo guidance printout', 1, 12900, '2024-04-01T08:00:00Z'),
    (1006, 4, 'Core rope memory',         1, 25900, '2024-04-18T17:20:00Z'),
    (1007, 6, 'CLU reference',            1,  3100, '2024-05-12T11:00:00Z'),
    (1008, 6, 'Substitution stickers',    5,   500, '2024-05-30T14:10:00Z'),
    (1009, 3, 'Mechanical keyboard',      1, 15900, '2024-03-03T19:40:00Z'),
    (1010, 1, 'Bernoulli numbers poster', 1,  1900, '2024-06-07T09:35:00Z'),
    (1011, 2, 'Moth in a logbook',        1,  9900, '2024-06-21T16:25:00Z'),
    (1012, 4, 'Margin of safety mug',     2,  2400, '2024-07-04T10:05:00Z');
