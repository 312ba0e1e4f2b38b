//! A uniform view of toml_edit's items, values and tables, so one walker can
//! read `[[tools]]` and `tools = [{...}]` alike and keep every span.

use std::ops::Range;

use toml_edit::{Item, Table, TableLike, Value};

/// Anything the registry walker looks at.
#[derive(Clone, Copy)]
pub(crate) enum Node<'a> {
    Item(&'a Item),
    Value(&'a Value),
    Table(&'a Table),
}

impl<'a> Node<'a> {
    pub(crate) fn span(&self) -> Option<Range<usize>> {
        match self {
            Node::Item(item) => item.span(),
            Node::Value(value) => value.span(),
            Node::Table(table) => table.span(),
        }
    }

    fn value(&self) -> Option<&'a Value> {
        match self {
            Node::Item(item) => item.as_value(),
            Node::Value(value) => Some(value),
            Node::Table(_) => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&'a str> {
        self.value().and_then(Value::as_str)
    }

    pub(crate) fn as_integer(&self) -> Option<i64> {
        self.value().and_then(Value::as_integer)
    }

    /// An integer or a float, as a float.
    pub(crate) fn as_number(&self) -> Option<f64> {
        let value = self.value()?;
        value
            .as_float()
            .or_else(|| value.as_integer().map(|i| i as f64))
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        self.value().and_then(Value::as_bool)
    }

    /// The elements of an array or an array of tables.
    pub(crate) fn as_array(&self) -> Option<Vec<Node<'a>>> {
        match self {
            Node::Item(Item::ArrayOfTables(tables)) => {
                Some(tables.iter().map(Node::Table).collect())
            }
            _ => self
                .value()
                .and_then(Value::as_array)
                .map(|array| array.iter().map(Node::Value).collect()),
        }
    }

    pub(crate) fn as_table(&self) -> Option<&'a dyn TableLike> {
        match self {
            Node::Item(item) => item.as_table_like(),
            Node::Value(Value::InlineTable(table)) => Some(table as &dyn TableLike),
            Node::Value(_) => None,
            Node::Table(table) => Some(*table as &dyn TableLike),
        }
    }

    /// The TOML type, for messages ("expected a string, found an integer").
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Node::Item(Item::Table(_)) | Node::Table(_) => "a table",
            Node::Item(Item::ArrayOfTables(_)) => "an array of tables",
            Node::Item(Item::None) => "nothing",
            Node::Item(Item::Value(value)) => value_type_name(value),
            Node::Value(value) => value_type_name(value),
        }
    }

    /// The value as JSON (for parameter defaults); tables and dates are not values.
    pub(crate) fn to_json(self) -> Option<serde_json::Value> {
        let value = self.value()?;
        Some(match value {
            Value::String(s) => serde_json::Value::String(s.value().clone()),
            Value::Integer(i) => serde_json::Value::from(*i.value()),
            Value::Float(f) => serde_json::Number::from_f64(*f.value())?.into(),
            Value::Boolean(b) => serde_json::Value::Bool(*b.value()),
            Value::Array(array) => serde_json::Value::Array(
                array
                    .iter()
                    .map(|v| Node::Value(v).to_json())
                    .collect::<Option<Vec<_>>>()?,
            ),
            Value::Datetime(_) | Value::InlineTable(_) => return None,
        })
    }
}

fn value_type_name(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::InlineTable(_) => "a table",
    }
}

/// The entries of a table with their key spans, in file order.
pub(crate) fn entries<'a>(
    table: &'a dyn TableLike,
) -> Vec<(&'a str, Option<Range<usize>>, Node<'a>)> {
    table
        .iter()
        .filter_map(|(name, _)| {
            let (key, item) = table.get_key_value(name)?;
            Some((key.get(), key.span(), Node::Item(item)))
        })
        .collect()
}
