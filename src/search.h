#ifndef TT_SEARCH_H
#define TT_SEARCH_H
#endif
