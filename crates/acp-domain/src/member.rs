//! A user's role in a workspace.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads.
    Member,
    /// Reads, and approves or denies policy challenges.
    Approver,
    /// Changes anything but ownership.
    Admin,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Admin => "admin",
            Self::Approver => "approver",
            Self::Member => "member",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "owner" => Some(Self::Owner),
            "admin" => Some(Self::Admin),
            "approver" => Some(Self::Approver),
            "member" => Some(Self::Member),
            _ => None,
        }
    }

    /// Owners and admins manage keys, policies and members; approvers and members read.
    pub fn can_manage(self) -> bool {
        self >= Self::Admin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_what_they_may_do() {
        assert!(Role::Owner > Role::Admin && Role::Admin > Role::Approver);
        assert!(Role::Approver > Role::Member);
        assert!(Role::Admin.can_manage() && !Role::Approver.can_manage());
        assert!(!Role::Member.can_manage());
        for r in [Role::Owner, Role::Admin, Role::Approver, Role::Member] {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
